package client

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"

	pb "github.com/gpuplane/gpuplane/api/gpuplane/v1"
)

// WaitOptions tune the Wait helpers.
type WaitOptions struct {
	// PollInterval is how often to look; default one second.
	PollInterval time.Duration
	// Progress, when set, is called with every state whose phase or
	// conditions differ from the previous one (what `gpuplanectl request
	// --wait` prints).
	Progress func(vc *pb.VirtualCluster)
	// Request, for WaitForVirtualCluster: the name of the request that
	// creates or changes the virtual cluster. While the virtual cluster
	// waits for approval, a request that was rejected, cancelled or failed
	// ends the wait, and its decision explains a virtual cluster that will
	// not come.
	Request string
}

func (o WaitOptions) interval() time.Duration {
	if o.PollInterval <= 0 {
		return time.Second
	}
	return o.PollInterval
}

// NotReachableError says the awaited phase or state can no longer come
// (the virtual cluster FAILED or was deleted, its request was rejected).
type NotReachableError struct {
	// Name of the virtual cluster or request.
	Name string
	// What it is instead, e.g. "FAILED" or "REJECTED".
	State string
	// Why, from status.message, decisionReason or failureMessage.
	Message string
	// Decider of a rejected or cancelled request.
	Decider string
}

func (e *NotReachableError) Error() string {
	msg := e.Message
	if msg == "" {
		msg = "-"
	}
	by := ""
	if e.Decider != "" {
		by = " by " + e.Decider
	}
	return fmt.Sprintf("%s is %s%s: %s", e.Name, e.State, by, msg)
}

// WaitForVirtualCluster polls a virtual cluster until its phase is one of
// phases (READY when none are given) and returns it. It gives up with a
// *NotReachableError when the virtual cluster FAILED, was REJECTED or is
// being deleted (unless that phase is awaited), with the API's error when a
// call fails, and with ctx's error when ctx ends: bound the wait with
// context.WithTimeout.
func (c *Client) WaitForVirtualCluster(ctx context.Context, name string, opts WaitOptions, phases ...pb.VirtualClusterStatus_Phase) (*pb.VirtualCluster, error) {
	if len(phases) == 0 {
		phases = []pb.VirtualClusterStatus_Phase{pb.VirtualClusterStatus_READY}
	}
	want := map[pb.VirtualClusterStatus_Phase]bool{}
	for _, p := range phases {
		want[p] = true
	}
	var last string
	for {
		vc, err := c.VirtualClusters.GetVirtualCluster(ctx, &pb.GetVirtualClusterRequest{Name: name})
		if err != nil {
			return nil, ctxErr(ctx, err)
		}
		if opts.Progress != nil {
			if seen := progressKey(vc); seen != last {
				opts.Progress(vc)
				last = seen
			}
		}
		phase := vc.GetStatus().GetPhase()
		if want[phase] {
			return vc, nil
		}
		switch phase {
		case pb.VirtualClusterStatus_FAILED:
			return vc, &NotReachableError{Name: name, State: phase.String(), Message: vc.GetStatus().GetMessage()}
		case pb.VirtualClusterStatus_REJECTED, pb.VirtualClusterStatus_DELETING, pb.VirtualClusterStatus_DELETED:
			if err := c.requestOutcome(ctx, opts.Request); err != nil {
				return vc, err
			}
			return vc, &NotReachableError{Name: name, State: phase.String(), Message: vc.GetStatus().GetMessage()}
		case pb.VirtualClusterStatus_PENDING_APPROVAL:
			if err := c.requestOutcome(ctx, opts.Request); err != nil {
				return vc, err
			}
		}
		if err := sleep(ctx, opts.interval()); err != nil {
			return vc, err
		}
	}
}

// requestOutcome is a *NotReachableError when the request (if any) was
// rejected, cancelled or failed; nil otherwise, and when it cannot be read
// (the virtual cluster's own state then speaks).
func (c *Client) requestOutcome(ctx context.Context, name string) error {
	if name == "" {
		return nil
	}
	r, err := c.Requests.GetRequest(ctx, &pb.GetRequestRequest{Name: name})
	if err != nil || !IsFinal(r.GetState()) || r.GetState() == pb.Request_APPLIED {
		return nil
	}
	return requestNotReachable(name, r)
}

func requestNotReachable(name string, r *pb.Request) *NotReachableError {
	why := r.GetDecisionReason()
	if r.GetState() == pb.Request_FAILED {
		why = r.GetFailureMessage()
	}
	return &NotReachableError{Name: name, State: r.GetState().String(), Message: why, Decider: r.GetDecider()}
}

// ctxErr is ctx's error when ctx has ended, else err. gRPC may report an
// expiring deadline a moment before ctx does; that, too, is the deadline.
func ctxErr(ctx context.Context, err error) error {
	if dl, ok := ctx.Deadline(); ok && Code(err) == codes.DeadlineExceeded && time.Until(dl) < 100*time.Millisecond {
		<-ctx.Done()
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// progressKey changes whenever the phase or a condition changes.
func progressKey(vc *pb.VirtualCluster) string {
	st := vc.GetStatus()
	key := st.GetPhase().String()
	for _, c := range st.GetConditions() {
		key += "|" + c.GetType() + "=" + c.GetStatus().String()
	}
	return key
}

// IsFinal reports whether a request's state will not change any more:
// APPLIED, REJECTED, CANCELLED or FAILED.
func IsFinal(s pb.Request_State) bool {
	switch s {
	case pb.Request_APPLIED, pb.Request_REJECTED, pb.Request_CANCELLED, pb.Request_FAILED:
		return true
	}
	return false
}

// WaitForRequest polls a request until its state is final (IsFinal) and
// returns it. A request that ends REJECTED, CANCELLED or FAILED is
// returned together with a *NotReachableError, so `err == nil` means it was
// APPLIED.
func (c *Client) WaitForRequest(ctx context.Context, name string, opts WaitOptions) (*pb.Request, error) {
	for {
		r, err := c.Requests.GetRequest(ctx, &pb.GetRequestRequest{Name: name})
		if err != nil {
			return nil, ctxErr(ctx, err)
		}
		if IsFinal(r.GetState()) {
			if r.GetState() == pb.Request_APPLIED {
				return r, nil
			}
			return r, requestNotReachable(name, r)
		}
		if err := sleep(ctx, opts.interval()); err != nil {
			return r, err
		}
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
