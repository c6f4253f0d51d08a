package ctl

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestWaitEndedByItsOwnDeadline: a call (or watch) that fails with
// DEADLINE_EXCEEDED just before the wait's own deadline passes is the wait
// timing out, reported as such ("timed out after ..."), not as a server
// that did not answer. gRPC's timer may fire a moment before the context's:
// the CI run that found this got "the gpuplane API ... did not answer
// within 30s" from `request vcluster --wait --timeout 2s`.
func TestWaitEndedByItsOwnDeadline(t *testing.T) {
	deadline := status.Error(codes.DeadlineExceeded, "context deadline exceeded")

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if !waitEnded(ctx, deadline) {
		t.Fatal("DEADLINE_EXCEEDED 50ms before the wait's deadline: not taken for the wait's end")
	}
	if ctx.Err() == nil {
		t.Fatal("waitEnded returned before the wait's context ended")
	}

	// Far from the deadline it is the server's (or the network's) doing.
	far, cancelFar := context.WithTimeout(context.Background(), time.Hour)
	defer cancelFar()
	if waitEnded(far, deadline) {
		t.Fatal("DEADLINE_EXCEEDED an hour before the wait's deadline taken for the wait's end")
	}
	if waitEnded(far, errors.New("connection refused")) {
		t.Fatal("another error taken for the wait's end")
	}

	// Once the wait's context is over, any error is the wait's end.
	over, cancelOver := context.WithCancel(context.Background())
	cancelOver()
	if !waitEnded(over, status.Error(codes.Unavailable, "closing")) {
		t.Fatal("an error after the wait ended not taken for its end")
	}
}
