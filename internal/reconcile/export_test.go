package reconcile

// SetBeforeStep installs a hook that runs before each step of a reconcile
// (load, observe-before, apply, observe, record-status, delete,
// record-deleted). Set it before the worker starts.
func SetBeforeStep(w *Worker, f func(step string)) { w.beforeStep = f }
