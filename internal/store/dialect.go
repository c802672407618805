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
	// LockSession, in a write transaction, locks the row of session $1 until the
	// transaction ends; "" for an engine whose writes are serialized anyway.
	LockSession string
	// AppendJournal, in a write transaction about to commit, inserts the journal entries
	// $1, a JSON array of [session, kind, ref], in order, each at $2, and returns their
	// sequence numbers; it holds, until the transaction ends, what makes those numbers
	// its commit order (nothing where writes are serialized anyway).
	AppendJournal string
	// ClaimLease takes lease $9 for a new holder — token $1, pid $2, start $3, hostname
	// $4, acquired $5, expiring $6, URL $7, owner $8 — if its token is still $10 and its
	// expiry still $11 (a renewal keeps the token), and skips it, changing nothing,
	// while another transaction holds its row.
	ClaimLease string
	// Clock selects the database server's time, in milliseconds since the epoch; "" for
	// a database of one host, whose time is the host's.
	Clock string
}

// sqliteDialect is SQLite's: one writer at a time, so nothing to lock or skip.
var sqliteDialect = Dialect{
	RowID: "INTEGER PRIMARY KEY",
	// SQLite's planner might scan the journal by seq for a session whose entries are few.
	JournalOfSession: `SELECT j.seq, j.at_ms, j.session_id, s.name, j.kind, j.ref_id
		FROM journal j INDEXED BY journal_by_session JOIN sessions s ON s.id = j.session_id
		WHERE j.session_id = $1 AND j.seq > $2 ORDER BY j.seq LIMIT $3`,
	ClaimLease: `UPDATE leases SET token = $1, pid = $2, start = $3, hostname = $4, acquired_at_ms = $5,
		expires_at_ms = $6, url = $7, owner = $8 WHERE key = $9 AND token = $10 AND expires_at_ms = $11`,
	AppendJournal: `INSERT INTO journal (session_id, at_ms, kind, ref_id)
		SELECT json_extract(value, '$[0]'), $2, json_extract(value, '$[1]'), json_extract(value, '$[2]')
		FROM json_each($1) ORDER BY key RETURNING seq`,
}
