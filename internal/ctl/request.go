package ctl

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/gpuplane/gpuplane/api/gpuplane/v1"
	"github.com/gpuplane/gpuplane/pkg/client"
)

func (c *cli) requestCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "request KIND ...",
		Short: "Ask for a virtual cluster, more quota, or a deletion",
		Long: `Ask for resources on behalf of a team you own. A department admin decides, or
an approval policy approves at once. --team defaults to the one team you own.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usagef("unknown kind %q: request vcluster, quota, upgrade or delete", args[0])
			}
			return usagef("name what to request: vcluster, quota, upgrade or delete")
		},
		RunE: func(*cobra.Command, []string) error { return nil },
	}
	cmd.AddCommand(c.requestVClusterCmd(), c.requestQuotaCmd(), c.requestUpgradeCmd(), c.requestDeleteCmd())
	return cmd
}

type requestCommon struct {
	team, justification, requestID string
}

func (r *requestCommon) bind(cmd *cobra.Command) {
	cmd.Flags().StringVar(&r.team, "team", "", "team the request is for (default: the one team you own)")
	cmd.Flags().StringVar(&r.justification, "justification", "", "why, for whoever decides")
	cmd.Flags().StringVar(&r.requestID, "request-id", "", "idempotency key: a retry with the same id returns the first request")
}

type waitFlags struct {
	wait    bool
	timeout time.Duration
	poll    time.Duration
}

func (w *waitFlags) bind(cmd *cobra.Command) {
	cmd.Flags().BoolVar(&w.wait, "wait", false, "wait until the virtual cluster is READY, showing progress")
	cmd.Flags().DurationVar(&w.timeout, "timeout", 10*time.Minute, "with --wait: give up after this long")
	cmd.Flags().DurationVar(&w.poll, "poll-interval", time.Second, "with --wait, against servers without watches: how often to look")
	_ = cmd.Flags().MarkHidden("poll-interval")
}

func (c *cli) requestVClusterCmd() *cobra.Command {
	var common requestCommon
	var quota, limit quotaFlags
	var w waitFlags
	var fractional bool
	var display, k8sVersion, chartVersion string
	var weight, priority int32
	var expireIn time.Duration
	cmd := &cobra.Command{
		Use:     "vcluster NAME",
		Aliases: []string{"virtualcluster", "vc"},
		Short:   "Ask for a new virtual cluster",
		Example: `  gpuplanectl request vcluster ml-dev --gpu 1 --wait
  gpuplanectl request vcluster ml-dev --team team-a --gpu 2 --cpu 16 --memory 64Gi --justification "fine-tuning" --wait
  gpuplanectl request vcluster notebook --gpu 0.5 --fractional --expire-in 72h`,
		Args: exactArgs(1, "the virtual cluster name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			q, err := quota.quota(cmd, nil)
			if err != nil {
				return err
			}
			spec := &pb.VirtualClusterSpec{
				DisplayName: display, Quota: q, AllowFractionalGpus: fractional,
				KubernetesVersion: k8sVersion, ChartVersion: chartVersion, OverQuotaWeight: weight, Priority: priority,
			}
			if limit.changed(cmd) {
				if spec.Limit, err = limit.quota(cmd, q); err != nil {
					return err
				}
			}
			if expireIn < 0 {
				return usagef("--expire-in must be positive")
			}
			if expireIn > 0 {
				spec.ExpireTime = timestamppb.New(c.opts.Now().Add(expireIn))
			}
			ctx := cmd.Context()
			api, err := c.api(ctx)
			if err != nil {
				return err
			}
			team, err := c.requestTeam(ctx, api, common.team)
			if err != nil {
				return err
			}
			req, err := c.createRequest(ctx, api, common, &pb.Request{Team: team, Payload: &pb.Request_CreateVirtualCluster{
				CreateVirtualCluster: &pb.CreateVirtualClusterPayload{VirtualClusterId: args[0], Spec: spec}}})
			if err != nil {
				return err
			}
			if !w.wait {
				return nil
			}
			vc := req.GetCreateVirtualCluster().GetVirtualCluster()
			if vc == "" {
				vc = team + "/virtualClusters/" + args[0]
			}
			return c.waitReady(ctx, api, vc, req.GetName(), w)
		},
	}
	common.bind(cmd)
	quota.bind(cmd, "", "guaranteed quota", "1", "8", "32Gi")
	limit.bind(cmd, "limit-", "optional hard cap", "", "", "")
	w.bind(cmd)
	cmd.Flags().BoolVar(&fractional, "fractional", false, "allow fractional GPUs (gpu-fraction pods; SHARED teams only)")
	cmd.Flags().StringVar(&display, "display-name", "", "human-readable name")
	cmd.Flags().StringVar(&k8sVersion, "kubernetes-version", "", "virtual cluster Kubernetes version (default: the server's)")
	cmd.Flags().StringVar(&chartVersion, "chart-version", "", "vCluster chart version (default: the server's)")
	cmd.Flags().Int32Var(&weight, "over-quota-weight", 0, "share of spare capacity relative to siblings (default 1)")
	cmd.Flags().Int32Var(&priority, "priority", 0, "KAI queue priority (default 100)")
	cmd.Flags().DurationVar(&expireIn, "expire-in", 0, "delete the virtual cluster automatically after this long (e.g. 72h)")
	return cmd
}

func (c *cli) requestQuotaCmd() *cobra.Command {
	var common requestCommon
	var quota, limit quotaFlags
	var accept bool
	cmd := &cobra.Command{
		Use:   "quota [VCLUSTER]",
		Short: "Ask for a different quota for a team, or for one of its virtual clusters",
		Long: `Without VCLUSTER: change the team's guaranteed quota. With it: change the
virtual cluster's quota (and --limit-*). Flags left out keep their current value.`,
		Example: `  gpuplanectl request quota --team team-a --gpu 6
  gpuplanectl request quota ml-dev --gpu 3 --memory 96Gi`,
		Args: maxArgs(1, "one virtual cluster"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !quota.changed(cmd) && !limit.changed(cmd) {
				return usagef("say what to change: --gpu, --cpu, --memory (or --limit-*)")
			}
			ctx := cmd.Context()
			api, err := c.api(ctx)
			if err != nil {
				return err
			}
			var r *pb.Request
			if len(args) == 0 {
				if limit.changed(cmd) {
					return usagef("--limit-* applies to virtual clusters, not teams")
				}
				team, err := c.requestTeam(ctx, api, common.team)
				if err != nil {
					return err
				}
				cctx, cancel := c.call(ctx)
				cur, err := api.Teams.GetTeam(cctx, &pb.GetTeamRequest{Name: team})
				cancel()
				if err != nil {
					return err
				}
				q, err := quota.quota(cmd, cur.GetQuota())
				if err != nil {
					return err
				}
				r = &pb.Request{Team: team, Payload: &pb.Request_ChangeTeamQuota{ChangeTeamQuota: &pb.ChangeTeamQuotaPayload{
					Quota: q, AcceptPreemption: accept}}}
			} else {
				cctx, cancel := c.call(ctx)
				defer cancel()
				name, err := c.resolveVC(cctx, api, args[0], common.team)
				if err != nil {
					return err
				}
				cur, err := api.VirtualClusters.GetVirtualCluster(cctx, &pb.GetVirtualClusterRequest{Name: name})
				if err != nil {
					return err
				}
				q, err := quota.quota(cmd, cur.GetSpec().GetQuota())
				if err != nil {
					return err
				}
				payload := &pb.ChangeVirtualClusterQuotaPayload{VirtualCluster: name, Quota: q, AcceptPreemption: accept,
					Limit: cur.GetSpec().GetLimit()}
				if limit.changed(cmd) {
					base := cur.GetSpec().GetLimit()
					if base == nil {
						base = q
					}
					if payload.Limit, err = limit.quota(cmd, base); err != nil {
						return err
					}
				}
				team := strings.Join(strings.Split(name, "/")[:2], "/")
				r = &pb.Request{Team: team, Payload: &pb.Request_ChangeVirtualClusterQuota{ChangeVirtualClusterQuota: payload}}
			}
			_, err = c.createRequest(ctx, api, common, r)
			return err
		},
	}
	common.bind(cmd)
	quota.bind(cmd, "", "new quota", "", "", "")
	limit.bind(cmd, "limit-", "new hard cap (virtual clusters)", "", "", "")
	cmd.Flags().BoolVar(&accept, "accept-preemption", false, "allow shrinking below what is allocated now (running pods may be preempted)")
	return cmd
}

func (c *cli) requestDeleteCmd() *cobra.Command {
	var common requestCommon
	cmd := &cobra.Command{
		Use:     "delete VCLUSTER",
		Short:   "Ask for a virtual cluster to be deleted",
		Example: `  gpuplanectl request delete ml-dev --justification "project done"`,
		Args:    exactArgs(1, "the virtual cluster"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return c.requestOnVC(cmd.Context(), common, args[0], func(name string) *pb.Request {
				return &pb.Request{Payload: &pb.Request_DeleteVirtualCluster{
					DeleteVirtualCluster: &pb.DeleteVirtualClusterPayload{VirtualCluster: name}}}
			})
		},
	}
	common.bind(cmd)
	return cmd
}

func (c *cli) requestUpgradeCmd() *cobra.Command {
	var common requestCommon
	var chartVersion, k8sVersion string
	cmd := &cobra.Command{
		Use:   "upgrade VCLUSTER",
		Short: "Ask for a virtual cluster to move to a newer vCluster chart or Kubernetes version",
		Long: `Existing virtual clusters keep their vCluster chart and Kubernetes version until
an upgrade is approved. Once applied, the control plane restarts once on the
new version. Downgrades are refused; Kubernetes moves one minor version at a time.`,
		Example: `  gpuplanectl request upgrade ml-dev --chart-version 0.36.1
  gpuplanectl request upgrade ml-dev --kubernetes-version 1.32`,
		Args: exactArgs(1, "the virtual cluster"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if chartVersion == "" && k8sVersion == "" {
				return usagef("name --chart-version and/or --kubernetes-version")
			}
			return c.requestOnVC(cmd.Context(), common, args[0], func(name string) *pb.Request {
				return &pb.Request{Payload: &pb.Request_ChangeVirtualClusterVersion{
					ChangeVirtualClusterVersion: &pb.ChangeVirtualClusterVersionPayload{VirtualCluster: name,
						ChartVersion: chartVersion, KubernetesVersion: k8sVersion}}}
			})
		},
	}
	common.bind(cmd)
	cmd.Flags().StringVar(&chartVersion, "chart-version", "", "vCluster chart version to move to (default: keep)")
	cmd.Flags().StringVar(&k8sVersion, "kubernetes-version", "", "virtual Kubernetes version to move to, e.g. 1.32 (default: keep, or the lowest the new chart runs)")
	return cmd
}

// requestOnVC creates the request payload(name) builds for the virtual
// cluster arg names, on behalf of its team.
func (c *cli) requestOnVC(ctx context.Context, common requestCommon, arg string, payload func(name string) *pb.Request) error {
	api, err := c.api(ctx)
	if err != nil {
		return err
	}
	cctx, cancel := c.call(ctx)
	name, err := c.resolveVC(cctx, api, arg, common.team)
	cancel()
	if err != nil {
		return err
	}
	r := payload(name)
	r.Team = strings.Join(strings.Split(name, "/")[:2], "/")
	_, err = c.createRequest(ctx, api, common, r)
	return err
}

// requestTeam is --team, or the only team the caller owns.
func (c *cli) requestTeam(ctx context.Context, api *client.Client, flag string) (string, error) {
	if flag != "" {
		return teamName(flag), nil
	}
	cctx, cancel := c.call(ctx)
	defer cancel()
	me, err := api.Identity.GetCurrentUser(cctx, &pb.GetCurrentUserRequest{})
	if err != nil {
		return "", err
	}
	var owned []string
	for _, tr := range me.GetTeamRoles() {
		if tr.GetRole() == pb.TeamRole_OWNER {
			owned = append(owned, tr.GetTeam())
		}
	}
	switch len(owned) {
	case 1:
		return owned[0], nil
	case 0:
		return "", usagef("--team is required (you own no team)")
	default:
		return "", usagef("--team is required: you own %s", strings.Join(owned, ", "))
	}
}

// createRequest stores the request and says what happens next.
func (c *cli) createRequest(ctx context.Context, api *client.Client, common requestCommon, r *pb.Request) (*pb.Request, error) {
	r.Justification = common.justification
	cctx, cancel := c.call(ctx)
	defer cancel()
	out, err := api.Requests.CreateRequest(cctx, &pb.CreateRequestRequest{Request: r, RequestId: common.requestID})
	if err != nil {
		return nil, err
	}
	if c.output != "table" {
		return out, c.printObject(out)
	}
	target, q := requestTarget(out)
	what := requestKind(out.GetKind()) + " " + target
	if q != nil {
		what += " (" + fmtQuota(q) + ")"
	}
	fmt.Fprintf(c.stdout(), "%s created: %s\n", out.GetName(), what)
	switch out.GetState() {
	case pb.Request_PENDING:
		fmt.Fprintf(c.stdout(), "State: PENDING, waiting for a department admin (gpuplanectl get request %s).\n", lastSegment(out.GetName()))
	case pb.Request_APPROVED, pb.Request_APPLIED:
		by := out.GetDecider()
		if p := out.GetApprovalPolicy(); p != "" {
			by = "policy " + lastSegment(p)
		}
		fmt.Fprintf(c.stdout(), "State: %s by %s.\n", out.GetState(), by)
	default:
		fmt.Fprintf(c.stdout(), "State: %s %s\n", out.GetState(), out.GetDecisionReason())
	}
	return out, nil
}

// ---------------------------------------------------------------- wait

// conditionMark: ✓ done, ✗ failed, … not yet.
func conditionMark(cond *pb.Condition, phase pb.VirtualClusterStatus_Phase) string {
	switch cond.GetStatus() {
	case pb.Condition_TRUE:
		return "✓"
	case pb.Condition_FALSE:
		if phase == pb.VirtualClusterStatus_FAILED || phase == pb.VirtualClusterStatus_DEGRADED {
			return "✗"
		}
	}
	return "…"
}

func progressLine(vc *pb.VirtualCluster) string {
	st := vc.GetStatus()
	var b strings.Builder
	b.WriteString(st.GetPhase().String() + " ")
	if st.GetPhase() == pb.VirtualClusterStatus_PENDING_APPROVAL {
		b.WriteString(" waiting for approval")
	}
	for _, cond := range st.GetConditions() {
		fmt.Fprintf(&b, " %s %s", cond.GetType(), conditionMark(cond, st.GetPhase()))
	}
	return strings.TrimRight(b.String(), " ")
}

// waitPolling polls the virtual cluster (and, while it waits for approval,
// its request) until it is READY, fails, or the timeout passes: waitReady
// (watch.go) falls back to it when the server serves no watches.
func (c *cli) waitPolling(ctx context.Context, api *client.Client, vcName, reqName string, w waitFlags, p *waitProgress) error {
	for {
		cctx, ccancel := c.call(ctx)
		got, err := api.VirtualClusters.GetVirtualCluster(cctx, &pb.GetVirtualClusterRequest{Name: vcName})
		ccancel()
		if err != nil && !waitEnded(ctx, err) {
			return err
		}
		if err == nil {
			if done, err := c.waitStep(ctx, api, got, reqName, p); done || err != nil {
				return err
			}
		}
		select {
		case <-ctx.Done():
			return p.ended(ctx, w)
		case <-time.After(w.poll):
		}
	}
}

// waitEnded says whether err is the wait's own deadline (ctx) ending a
// call, so that the wait reports its timeout rather than a server that did
// not answer. gRPC may report the deadline a moment before ctx does: then
// it waits for ctx.
func waitEnded(ctx context.Context, err error) bool {
	if dl, ok := ctx.Deadline(); ok && status.Code(err) == codes.DeadlineExceeded && time.Until(dl) < 100*time.Millisecond {
		<-ctx.Done()
	}
	return ctx.Err() != nil
}

// waitProgress is what a wait has shown so far.
type waitProgress struct {
	start  time.Time
	last   string
	vc     *pb.VirtualCluster
	vcName string
}

// waitStep prints a line when the virtual cluster changed and says
// whether the wait is over (READY: nil error; failed: the error).
func (c *cli) waitStep(ctx context.Context, api *client.Client, vc *pb.VirtualCluster, reqName string, p *waitProgress) (bool, error) {
	p.vc = vc
	if line := progressLine(vc); line != p.last {
		fmt.Fprintf(c.stdout(), "[%4.1fs] %s\n", c.opts.Now().Sub(p.start).Seconds(), line)
		p.last = line
	}
	st := vc.GetStatus()
	switch st.GetPhase() {
	case pb.VirtualClusterStatus_READY:
		fmt.Fprintf(c.stdout(), "%s is READY. Use it: gpuplanectl kubeconfig %s --merge\n", p.vcName, lastSegment(p.vcName))
		return true, nil
	case pb.VirtualClusterStatus_FAILED:
		return true, fmt.Errorf("%s FAILED: %s", p.vcName, orDash(st.GetMessage()))
	case pb.VirtualClusterStatus_REJECTED, pb.VirtualClusterStatus_DELETING, pb.VirtualClusterStatus_DELETED:
		return true, c.requestOutcome(ctx, api, p.vcName, reqName, st)
	case pb.VirtualClusterStatus_PENDING_APPROVAL:
		if err := c.requestOutcome(ctx, api, p.vcName, reqName, st); err != nil {
			return true, err
		}
	}
	return false, nil
}

// ended is the error of a wait whose context ended.
func (p *waitProgress) ended(ctx context.Context, w waitFlags) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		where := "not found yet"
		if p.vc != nil {
			where = "still " + p.vc.GetStatus().GetPhase().String()
			if m := p.vc.GetStatus().GetMessage(); m != "" {
				where += ": " + m
			}
		}
		return fmt.Errorf("timed out after %s waiting for %s to be READY (%s)", w.timeout, p.vcName, where)
	}
	return ctx.Err()
}

// requestOutcome explains a virtual cluster that will not become READY
// because its request was rejected or cancelled; nil while still pending.
func (c *cli) requestOutcome(ctx context.Context, api *client.Client, vcName, reqName string, st *pb.VirtualClusterStatus) error {
	if reqName != "" {
		cctx, cancel := c.call(ctx)
		r, err := api.Requests.GetRequest(cctx, &pb.GetRequestRequest{Name: reqName})
		cancel()
		if err == nil {
			switch r.GetState() {
			case pb.Request_REJECTED, pb.Request_CANCELLED, pb.Request_FAILED:
				why := r.GetDecisionReason()
				if r.GetState() == pb.Request_FAILED {
					why = r.GetFailureMessage()
				}
				by := ""
				if r.GetDecider() != "" {
					by = " by " + r.GetDecider()
				}
				return fmt.Errorf("%s was %s%s: %s", reqName, r.GetState(), by, orDash(why))
			}
		}
	}
	if st.GetPhase() == pb.VirtualClusterStatus_PENDING_APPROVAL {
		return nil
	}
	return fmt.Errorf("%s is %s: %s", vcName, st.GetPhase(), orDash(st.GetMessage()))
}

// ---------------------------------------------------------------- decide

func (c *cli) decideCmd(verb string) *cobra.Command {
	var reason, etag string
	cmd := &cobra.Command{
		Use:     verb + " REQUEST",
		Short:   strings.ToUpper(verb[:1]) + verb[1:] + " a pending request (department admins)",
		Example: "  gpuplanectl " + verb + " 7f3a9c --reason \"ok for Q4\"",
		Args:    exactArgs(1, "the request id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return c.withAPI(cmd, func(ctx context.Context) error {
				api, _ := c.api(ctx)
				name := qualify("requests", args[0])
				var out *pb.Request
				var err error
				if verb == "approve" {
					out, err = api.Requests.ApproveRequest(ctx, &pb.ApproveRequestRequest{Name: name, Reason: reason, Etag: etag})
				} else {
					out, err = api.Requests.RejectRequest(ctx, &pb.RejectRequestRequest{Name: name, Reason: reason, Etag: etag})
				}
				if err != nil {
					return err
				}
				return c.decided(out)
			})
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why (recorded with the decision)")
	cmd.Flags().StringVar(&etag, "etag", "", "fail if the request changed since you read it")
	return cmd
}

func (c *cli) cancelCmd() *cobra.Command {
	var etag string
	cmd := &cobra.Command{
		Use:   "cancel REQUEST",
		Short: "Withdraw a pending request",
		Args:  exactArgs(1, "the request id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return c.withAPI(cmd, func(ctx context.Context) error {
				api, _ := c.api(ctx)
				out, err := api.Requests.CancelRequest(ctx, &pb.CancelRequestRequest{Name: qualify("requests", args[0]), Etag: etag})
				if err != nil {
					return err
				}
				return c.decided(out)
			})
		},
	}
	cmd.Flags().StringVar(&etag, "etag", "", "fail if the request changed since you read it")
	return cmd
}

func (c *cli) decided(r *pb.Request) error {
	if c.output != "table" {
		return c.printObject(r)
	}
	_, err := fmt.Fprintf(c.stdout(), "%s %s\n", r.GetName(), r.GetState())
	return err
}

func (c *cli) checkFitCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "check-fit REQUEST",
		Short: "Would the request fit the quota hierarchy if approved now?",
		Args:  exactArgs(1, "the request id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return c.withAPI(cmd, func(ctx context.Context) error {
				api, _ := c.api(ctx)
				res, err := api.Requests.CheckFit(ctx, &pb.CheckFitRequest{Name: qualify("requests", args[0])})
				if err != nil {
					return err
				}
				if c.output != "table" {
					return c.printObject(res)
				}
				if res.GetFits() {
					fmt.Fprintln(c.stdout(), "Fits.")
					return nil
				}
				t := newTable(c.stdout())
				t.row("LEVEL", "NAME", "RESOURCE", "REQUESTED", "FREE", "CAPACITY")
				for _, s := range res.GetShortfalls() {
					t.row(s.GetLevel(), s.GetName(), s.GetResource(), s.GetRequested(), s.GetFree(), orDash(s.GetCapacity()))
				}
				if err := t.flush(); err != nil {
					return err
				}
				return errors.New("the request does not fit")
			})
		},
	}
}
