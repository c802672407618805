package store

// Dialect is an engine's statements where its database's SQL differs. Every other
// statement of the store is written once, in SQL both engines run as it is: $1, $2, …
// placeholders, types both take, functions both have.
type Dialect struct {
	// RowID is the type of a table's row id in the schema (see migrations): the key a
	// row inserted without one gets, one past the largest yet.
	RowID string
	// JournalOfSession selects the journal's entries of session $1 after sequence number
	// $2, at most $3, in order, through the index journal_by_session.
	JournalOfSession string
}

// sqliteDialect is SQLite's.
var sqliteDialect = Dialect{
	RowID: "INTEGER PRIMARY KEY",
	// SQLite's planner might scan the journal by seq for a session whose entries are few.
	JournalOfSession: `SELECT j.seq, j.at_ms, j.session_id, s.name, j.kind, j.ref_id
		FROM journal j INDEXED BY journal_by_session JOIN sessions s ON s.id = j.session_id
		WHERE j.session_id = $1 AND j.seq > $2 ORDER BY j.seq LIMIT $3`,
}
