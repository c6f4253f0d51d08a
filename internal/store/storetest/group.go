package storetest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/gpuplane/gpuplane/internal/store"
)

// LineUp runs calls, each a change of key on db (store.DB.InGroupTx), in
// one batch: it holds a change of key open (HoldGroup), queues calls
// behind it in the order given, then lets them run, and returns what each
// call returned. A failing blocker fails the test.
func LineUp(t testing.TB, ctx context.Context, db *store.DB, key string, blocker func(context.Context, *store.Tx) error, calls ...func() error) []error {
	t.Helper()
	release, blocked := HoldGroup(t, ctx, db, key, blocker)
	results := make([]error, len(calls))
	var wg sync.WaitGroup
	for i, call := range calls {
		WaitGroupPending(t, db, key, i)
		wg.Go(func() { results[i] = call() })
	}
	WaitGroupPending(t, db, key, len(calls))
	release()
	wg.Wait()
	if err := <-blocked; err != nil {
		t.Fatalf("the change holding %s open: %v", key, err)
	}
	return results
}

// HoldGroup starts a change of key that waits inside its transaction until
// release is called and then runs blocker (nil: nothing), so that what is
// queued meanwhile forms the next batch; it returns once that change runs,
// with where its result will be.
func HoldGroup(t testing.TB, ctx context.Context, db *store.DB, key string, blocker func(context.Context, *store.Tx) error) (release func(), done <-chan error) {
	t.Helper()
	running, hold := make(chan struct{}), make(chan struct{})
	errc := make(chan error, 1)
	go func() {
		errc <- db.InGroupTx(ctx, key, func(ctx context.Context, tx *store.Tx) error {
			close(running)
			<-hold
			if blocker == nil {
				return nil
			}
			return blocker(ctx, tx)
		})
	}()
	<-running
	return func() { close(hold) }, errc
}

// WaitGroupPending waits until n changes of key wait for the next batch.
func WaitGroupPending(t testing.TB, db *store.DB, key string, n int) {
	t.Helper()
	for range 2000 {
		if db.GroupPending(key) >= n {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("only %d changes queued for %s, want %d", db.GroupPending(key), key, n)
}
