package ctl

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"

	pb "github.com/gpuplane/gpuplane/api/gpuplane/v1"
)

// quotaFlags are --gpu, --cpu, --memory (with a prefix: --limit-gpu ...).
type quotaFlags struct {
	prefix           string
	gpu, cpu, memory string
}

func (q *quotaFlags) bind(cmd *cobra.Command, prefix, what, defGPU, defCPU, defMemory string) {
	q.prefix = prefix
	cmd.Flags().StringVar(&q.gpu, prefix+"gpu", defGPU, what+": GPUs, up to two decimals (0.5 = half a GPU)")
	cmd.Flags().StringVar(&q.cpu, prefix+"cpu", defCPU, what+": CPU (16, 500m)")
	cmd.Flags().StringVar(&q.memory, prefix+"memory", defMemory, what+": memory (64Gi, 512Mi)")
}

func (q *quotaFlags) changed(cmd *cobra.Command) bool {
	f := cmd.Flags()
	return f.Changed(q.prefix+"gpu") || f.Changed(q.prefix+"cpu") || f.Changed(q.prefix+"memory")
}

// quota builds the message; unset flags keep base's values (base may be nil).
func (q *quotaFlags) quota(cmd *cobra.Command, base *pb.Quota) (*pb.Quota, error) {
	out := &pb.Quota{}
	if base != nil {
		out = proto.Clone(base).(*pb.Quota)
	}
	f := cmd.Flags()
	if base == nil || f.Changed(q.prefix+"gpu") {
		out.Gpu = strings.TrimSpace(q.gpu)
	}
	if base == nil || f.Changed(q.prefix+"cpu") {
		v, err := parseCPU(q.prefix+"cpu", q.cpu)
		if err != nil {
			return nil, err
		}
		out.CpuMillis = v
	}
	if base == nil || f.Changed(q.prefix+"memory") {
		v, err := parseMemory(q.prefix+"memory", q.memory)
		if err != nil {
			return nil, err
		}
		out.MemoryBytes = v
	}
	return out, nil
}

func (c *cli) createCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "create KIND ...",
		Short: "Create a department, team, member or approval policy",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usagef("unknown kind %q: create department, team, member or policy", args[0])
			}
			return usagef("name what to create: department, team, member or policy")
		},
		RunE: func(*cobra.Command, []string) error { return nil },
	}
	cmd.AddCommand(c.createDepartmentCmd(), c.createTeamCmd(), c.createMemberCmd(), c.createPolicyCmd())
	return cmd
}

// created prints the new object: its name, or the object with -o.
func (c *cli) created(m interface {
	proto.Message
	GetName() string
}) error {
	if c.output == "table" {
		_, err := fmt.Fprintf(c.stdout(), "%s created\n", m.GetName())
		return err
	}
	return c.printObject(m)
}

func (c *cli) createDepartmentCmd() *cobra.Command {
	var q quotaFlags
	var display, requestID string
	var admins []string
	cmd := &cobra.Command{
		Use:     "department ID",
		Aliases: []string{"dept"},
		Short:   "Create a department (platform admins)",
		Example: `  gpuplanectl create department research --display-name Research --gpu 8 --cpu 128 --memory 1Ti --admin-group research-admins`,
		Args:    exactArgs(1, "the department id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			budget, err := q.quota(cmd, nil)
			if err != nil {
				return err
			}
			return c.withAPI(cmd, func(ctx context.Context) error {
				api, _ := c.api(ctx)
				d, err := api.Departments.CreateDepartment(ctx, &pb.CreateDepartmentRequest{
					DepartmentId: args[0], RequestId: requestID,
					Department: &pb.Department{DisplayName: display, QuotaBudget: budget, AdminGroups: admins},
				})
				if err != nil {
					return err
				}
				return c.created(d)
			})
		},
	}
	q.bind(cmd, "", "budget", "0", "0", "0")
	cmd.Flags().StringVar(&display, "display-name", "", "human-readable name")
	cmd.Flags().StringSliceVar(&admins, "admin-group", nil, "OIDC group whose members administer the department (repeatable)")
	cmd.Flags().StringVar(&requestID, "request-id", "", "idempotency key: a retry with the same id returns the first result")
	return cmd
}

func (c *cli) createTeamCmd() *cobra.Command {
	var q quotaFlags
	var dept, tier, display, requestID string
	cmd := &cobra.Command{
		Use:     "team ID",
		Short:   "Create a team in a department (department admins)",
		Example: `  gpuplanectl create team team-c --department research --tier shared --gpu 1 --cpu 8 --memory 32Gi`,
		Args:    exactArgs(1, "the team id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if dept == "" {
				return usagef("--department is required")
			}
			t, ok := pb.IsolationTier_value[strings.ToUpper(tier)]
			if !ok || t == 0 {
				return usagef("--tier %q: shared or dedicated", tier)
			}
			quota, err := q.quota(cmd, nil)
			if err != nil {
				return err
			}
			return c.withAPI(cmd, func(ctx context.Context) error {
				api, _ := c.api(ctx)
				team, err := api.Teams.CreateTeam(ctx, &pb.CreateTeamRequest{
					TeamId: args[0], RequestId: requestID,
					Team: &pb.Team{Department: qualify("departments", dept), DisplayName: display,
						IsolationTier: pb.IsolationTier(t), Quota: quota},
				})
				if err != nil {
					return err
				}
				return c.created(team)
			})
		},
	}
	q.bind(cmd, "", "guaranteed quota", "0", "0", "0")
	cmd.Flags().StringVar(&dept, "department", "", "department of the team (required)")
	cmd.Flags().StringVar(&tier, "tier", "shared", "isolation tier: shared (fractional GPUs allowed) or dedicated")
	cmd.Flags().StringVar(&display, "display-name", "", "human-readable name")
	cmd.Flags().StringVar(&requestID, "request-id", "", "idempotency key")
	return cmd
}

func (c *cli) createMemberCmd() *cobra.Command {
	var team, user, group, role, requestID string
	cmd := &cobra.Command{
		Use:   "member [ID]",
		Short: "Add a user or an OIDC group to a team (team owners)",
		Long:  "Add a user or an OIDC group to a team. Without ID the server derives one from the user or group.",
		Example: `  gpuplanectl create member --team team-a --user dave@example.com --role member
  gpuplanectl create member ml --team team-a --group ml-engineers --role viewer`,
		Args: maxArgs(1, "one member id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if team == "" {
				return usagef("--team is required")
			}
			if (user == "") == (group == "") {
				return usagef("set exactly one of --user and --group")
			}
			r, ok := pb.TeamRole_value[strings.ToUpper(role)]
			if !ok || r == 0 {
				return usagef("--role %q: owner, member or viewer", role)
			}
			m := &pb.Member{Role: pb.TeamRole(r)}
			if user != "" {
				m.Principal = &pb.Member_User{User: user}
			} else {
				m.Principal = &pb.Member_Group{Group: group}
			}
			id := ""
			if len(args) == 1 {
				id = args[0]
			}
			return c.withAPI(cmd, func(ctx context.Context) error {
				api, _ := c.api(ctx)
				out, err := api.Members.CreateMember(ctx, &pb.CreateMemberRequest{
					Parent: teamName(team), MemberId: id, Member: m, RequestId: requestID})
				if err != nil {
					return err
				}
				return c.created(out)
			})
		},
	}
	cmd.Flags().StringVar(&team, "team", "", "team (required)")
	cmd.Flags().StringVar(&user, "user", "", "user, as the token's username claim (usually the email)")
	cmd.Flags().StringVar(&group, "group", "", "OIDC group")
	cmd.Flags().StringVar(&role, "role", "member", "owner, member or viewer")
	cmd.Flags().StringVar(&requestID, "request-id", "", "idempotency key")
	return cmd
}

func (c *cli) createPolicyCmd() *cobra.Command {
	var expr, display, requestID string
	var disabled bool
	cmd := &cobra.Command{
		Use:     "policy ID",
		Aliases: []string{"approvalpolicy"},
		Short:   "Create an auto-approval policy (platform admins)",
		Example: `  gpuplanectl create policy small-research --expression 'request.gpu_delta <= 1.0 && department.name == "research"'`,
		Args:    exactArgs(1, "the policy id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if expr == "" {
				return usagef("--expression is required")
			}
			return c.withAPI(cmd, func(ctx context.Context) error {
				api, _ := c.api(ctx)
				p, err := api.Policies.CreateApprovalPolicy(ctx, &pb.CreateApprovalPolicyRequest{
					ApprovalPolicyId: args[0], RequestId: requestID,
					ApprovalPolicy: &pb.ApprovalPolicy{Expression: expr, DisplayName: display, Disabled: disabled}})
				if err != nil {
					return err
				}
				return c.created(p)
			})
		},
	}
	cmd.Flags().StringVar(&expr, "expression", "", "CEL expression over request, team and department (required)")
	cmd.Flags().StringVar(&display, "display-name", "", "human-readable name")
	cmd.Flags().BoolVar(&disabled, "disabled", false, "create it disabled")
	cmd.Flags().StringVar(&requestID, "request-id", "", "idempotency key")
	return cmd
}

// withAPI makes sure the client exists, then runs fn under the per-call
// deadline.
func (c *cli) withAPI(cmd *cobra.Command, fn func(ctx context.Context) error) error {
	if _, err := c.api(cmd.Context()); err != nil {
		return err
	}
	ctx, cancel := c.call(cmd.Context())
	defer cancel()
	return fn(ctx)
}
