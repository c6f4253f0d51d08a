package store

// GroupPending is how many members of key wait for the next batch.
func GroupPending(db *DB, key string) int {
	db.groups.mu.Lock()
	defer db.groups.mu.Unlock()
	if st := db.groups.byKey[key]; st != nil {
		return len(st.pending)
	}
	return 0
}
