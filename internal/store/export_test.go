package store

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
