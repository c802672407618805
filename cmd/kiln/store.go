package main

import (
	"fmt"
	"io"
	"time"

	"github.com/kilnrt/kiln/admin"
	"github.com/spf13/cobra"
)

func newStore() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "store",
		Short: "Migrate and check the durable record",
		Long: `Migrate and check the durable record: the data directory's SQLite file, or the
PostgreSQL database --store (else kiln.toml's store) names, its password in PGPASSWORD.`,
		Args: usageArgs(cobra.NoArgs),
	}
	cmd.AddCommand(newStoreMigrate(), newStoreCheck())
	return cmd
}

// storeFlags name the record a kiln store command works on.
type storeFlags struct {
	data   dataFlags
	store  string
	asJSON bool
}

func (f *storeFlags) add(cmd *cobra.Command, json string) {
	f.data.addData(cmd)
	cmd.Flags().StringVar(&f.store, "store", "", "the PostgreSQL database of the record, postgres://USER@HOST/DB (default kiln.toml's store, else <data>/kiln.db)")
	addJSON(cmd, &f.asJSON, json)
}

func newStoreMigrate() *cobra.Command {
	var flags storeFlags
	cmd := &cobra.Command{
		Use:   "migrate [--data DIR] [--store URL]",
		Short: "Bring the record to this kiln's schema",
		Long: `Bring the record to the schema version this kiln writes, one migration at a time, each
in a transaction of its own; a record made by a newer kiln is refused and left as it
is. kiln serve migrates as it starts too; run this first to migrate apart from a start,
as daemons of one database are upgraded.`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			dir, err := flags.data.dataDir()
			if err != nil {
				return err
			}
			rec, err := admin.MigrateRecord(cmd.Context(), dir, flags.store)
			if err != nil {
				return err
			}
			if flags.asJSON {
				return printJSON(cmd.OutOrStdout(), map[string]any{"record": rec.Name, "schema_version": rec.SchemaVersion, "migrated_from": rec.MigratedFrom})
			}
			if rec.MigratedFrom == rec.SchemaVersion {
				fmt.Fprintf(cmd.OutOrStdout(), "kiln: %s is at schema version %d, this kiln's\n", rec.Name, rec.SchemaVersion)
				return nil
			}
			fmt.Fprintf(cmd.OutOrStdout(), "kiln: %s migrated from schema version %d to %d\n", rec.Name, rec.MigratedFrom, rec.SchemaVersion)
			return nil
		},
	}
	flags.add(cmd, `print one JSON object: {"record","schema_version","migrated_from"}`)
	return cmd
}

func newStoreCheck() *cobra.Command {
	var flags storeFlags
	cmd := &cobra.Command{
		Use:   "check [--data DIR] [--store URL]",
		Short: "Check the record's schema, integrity and leases",
		Long: `Check the record, changing nothing: its schema version, which must be this kiln's; its
integrity (SQLite's integrity and foreign key checks; on PostgreSQL, constraints and
indexes the server left not valid); the leases it holds, each with its holder and
whether that process lives; and its last journal entry, with how long ago it was
recorded. Exits 1 on the first problem found.`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			dir, err := flags.data.dataDir()
			if err != nil {
				return err
			}
			rec, checkErr := admin.CheckRecord(cmd.Context(), dir, flags.store)
			if rec.Name == "" {
				return checkErr
			}
			if flags.asJSON {
				leases := make([]map[string]any, len(rec.Leases))
				for i, l := range rec.Leases {
					leases[i] = map[string]any{"key": l.Key, "holder": l.Holder, "live": l.Live}
				}
				problem := ""
				if checkErr != nil {
					problem = checkErr.Error()
				}
				if err := printJSON(cmd.OutOrStdout(), map[string]any{"record": rec.Name, "schema_version": rec.SchemaVersion,
					"leases": leases, "last_seq": rec.LastSeq, "last_at": timeOrNil(rec.LastAt), "problem": problem}); err != nil {
					return err
				}
			} else {
				printCheck(cmd.OutOrStdout(), rec, checkErr)
			}
			if checkErr != nil {
				return errNotOK // the problem is shown
			}
			return nil
		},
	}
	flags.add(cmd, `print one JSON object: {"record","schema_version","leases","last_seq","last_at","problem"}`)
	return cmd
}

// printCheck shows what kiln store check found.
func printCheck(w io.Writer, rec admin.Record, problem error) {
	fmt.Fprintf(w, "record: %s\nschema version: %d\n", rec.Name, rec.SchemaVersion)
	if problem != nil {
		fmt.Fprintf(w, "integrity: %v\n", problem)
	} else {
		fmt.Fprintln(w, "integrity: ok")
	}
	fmt.Fprintf(w, "leases: %d\n", len(rec.Leases))
	for _, l := range rec.Leases {
		state := "live"
		if !l.Live {
			state = "dead: the next to ask takes it over"
		}
		fmt.Fprintf(w, "  %s  %s  (%s)\n", l.Key, l.Holder, state)
	}
	if rec.LastSeq == 0 {
		fmt.Fprintln(w, "journal: empty")
		return
	}
	fmt.Fprintf(w, "journal: last entry %d at %s (%s ago)\n", rec.LastSeq, rec.LastAt.UTC().Format(time.RFC3339),
		time.Since(rec.LastAt).Round(time.Second))
}

// timeOrNil is t for JSON, nil for the zero time.
func timeOrNil(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UTC()
}
