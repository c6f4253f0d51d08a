package store

// GroupPending is how many members of key wait for the next batch.
func GroupPending(db *DB, key string) int {
	db.groups.mu.Lock()
	defer db.groups.mu.Unlock()
	return len(db.groups.pending[key])
}
