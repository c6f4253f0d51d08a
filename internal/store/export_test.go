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

// SharedPending is how many SendShared calls wait for a pipeline.
func SharedPending(db *DB) int {
	db.shared.mu.Lock()
	defer db.shared.mu.Unlock()
	return len(db.shared.pending)
}

// SharedPipelines is how many pipelines SendShared sent for more than
// one call.
func SharedPipelines(db *DB) int64 { return db.shared.pipelines.Load() }

// SharedSenders is how many SendShared pipelines are in flight.
func SharedSenders(db *DB) int {
	db.shared.mu.Lock()
	defer db.shared.mu.Unlock()
	return db.shared.senders
}
