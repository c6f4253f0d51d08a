package ctl

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"

	pb "github.com/gpuplane/gpuplane/api/gpuplane/v1"
	"github.com/gpuplane/gpuplane/pkg/client"
)

type listQuery struct {
	team, filter, token string
	size                int32
}

// kind is one resource type of get/list.
type kind struct {
	names   []string // plural first, then singular and aliases
	team    string   // "required" (members), "optional" (virtual clusters), ""
	filter  bool
	columns []string
	row     func(proto.Message) []string
	get     func(ctx context.Context, c *cli, api *client.Client, name, team string) (proto.Message, error)
	list    func(ctx context.Context, api *client.Client, q listQuery) ([]proto.Message, string, error)
	wrap    func(items []proto.Message, next string) proto.Message
}

func msgs[T proto.Message](items []T) []proto.Message {
	out := make([]proto.Message, len(items))
	for i, x := range items {
		out[i] = x
	}
	return out
}

func typed[T proto.Message](items []proto.Message) []T {
	out := make([]T, len(items))
	for i, x := range items {
		out[i] = x.(T)
	}
	return out
}

// qualify turns an id into collection/id, leaving full names alone.
func qualify(collection, arg string) string {
	if strings.HasPrefix(arg, collection+"/") {
		return arg
	}
	return collection + "/" + arg
}

func teamName(team string) string { return qualify("teams", team) }

func requestKind(k pb.Request_Kind) string {
	switch k {
	case pb.Request_CREATE_VIRTUAL_CLUSTER:
		return "create-vcluster"
	case pb.Request_CHANGE_VIRTUAL_CLUSTER_QUOTA:
		return "vcluster-quota"
	case pb.Request_CHANGE_TEAM_QUOTA:
		return "team-quota"
	case pb.Request_DELETE_VIRTUAL_CLUSTER:
		return "delete-vcluster"
	case pb.Request_CHANGE_VIRTUAL_CLUSTER_VERSION:
		return "upgrade-vcluster"
	}
	return k.String()
}

func requestTarget(r *pb.Request) (target string, q *pb.Quota) {
	switch p := r.GetPayload().(type) {
	case *pb.Request_CreateVirtualCluster:
		return p.CreateVirtualCluster.GetVirtualClusterId(), p.CreateVirtualCluster.GetSpec().GetQuota()
	case *pb.Request_ChangeVirtualClusterQuota:
		return lastSegment(p.ChangeVirtualClusterQuota.GetVirtualCluster()), p.ChangeVirtualClusterQuota.GetQuota()
	case *pb.Request_ChangeTeamQuota:
		return lastSegment(r.GetTeam()), p.ChangeTeamQuota.GetQuota()
	case *pb.Request_DeleteVirtualCluster:
		return lastSegment(p.DeleteVirtualCluster.GetVirtualCluster()), nil
	case *pb.Request_ChangeVirtualClusterVersion:
		return lastSegment(p.ChangeVirtualClusterVersion.GetVirtualCluster()), nil
	}
	return "-", nil
}

func kinds() []*kind {
	return []*kind{
		{
			names: []string{"departments", "department", "dept", "depts"}, filter: true,
			columns: []string{"NAME", "DISPLAY NAME", "GPU", "CPU", "MEMORY", "ADMIN GROUPS"},
			row: func(m proto.Message) []string {
				d := m.(*pb.Department)
				b := d.GetQuotaBudget()
				return []string{lastSegment(d.GetName()), orDash(d.GetDisplayName()), fmtGPU(b.GetGpu()), fmtCPU(b.GetCpuMillis()),
					fmtMemory(b.GetMemoryBytes()), orDash(strings.Join(d.GetAdminGroups(), ","))}
			},
			get: func(ctx context.Context, _ *cli, api *client.Client, name, _ string) (proto.Message, error) {
				return api.Departments.GetDepartment(ctx, &pb.GetDepartmentRequest{Name: qualify("departments", name)})
			},
			list: func(ctx context.Context, api *client.Client, q listQuery) ([]proto.Message, string, error) {
				r, err := api.Departments.ListDepartments(ctx, &pb.ListDepartmentsRequest{PageSize: q.size, PageToken: q.token, Filter: q.filter})
				return msgs(r.GetDepartments()), r.GetNextPageToken(), err
			},
			wrap: func(items []proto.Message, next string) proto.Message {
				return &pb.ListDepartmentsResponse{Departments: typed[*pb.Department](items), NextPageToken: next}
			},
		},
		{
			names: []string{"teams", "team"}, filter: true,
			columns: []string{"NAME", "DEPARTMENT", "TIER", "GPU", "CPU", "MEMORY", "DISPLAY NAME"},
			row: func(m proto.Message) []string {
				t := m.(*pb.Team)
				q := t.GetQuota()
				return []string{lastSegment(t.GetName()), lastSegment(t.GetDepartment()), t.GetIsolationTier().String(),
					fmtGPU(q.GetGpu()), fmtCPU(q.GetCpuMillis()), fmtMemory(q.GetMemoryBytes()), orDash(t.GetDisplayName())}
			},
			get: func(ctx context.Context, _ *cli, api *client.Client, name, _ string) (proto.Message, error) {
				return api.Teams.GetTeam(ctx, &pb.GetTeamRequest{Name: teamName(name)})
			},
			list: func(ctx context.Context, api *client.Client, q listQuery) ([]proto.Message, string, error) {
				r, err := api.Teams.ListTeams(ctx, &pb.ListTeamsRequest{PageSize: q.size, PageToken: q.token, Filter: q.filter})
				return msgs(r.GetTeams()), r.GetNextPageToken(), err
			},
			wrap: func(items []proto.Message, next string) proto.Message {
				return &pb.ListTeamsResponse{Teams: typed[*pb.Team](items), NextPageToken: next}
			},
		},
		{
			names: []string{"members", "member"}, team: "required", filter: true,
			columns: []string{"NAME", "KIND", "PRINCIPAL", "ROLE"},
			row: func(m proto.Message) []string {
				mb := m.(*pb.Member)
				kind, who := "user", mb.GetUser()
				if g := mb.GetGroup(); g != "" {
					kind, who = "group", g
				}
				return []string{lastSegment(mb.GetName()), kind, who, mb.GetRole().String()}
			},
			get: func(ctx context.Context, _ *cli, api *client.Client, name, team string) (proto.Message, error) {
				if !strings.HasPrefix(name, "teams/") {
					if team == "" {
						return nil, usagef("--team is required (or name the member as teams/TEAM/members/ID)")
					}
					name = teamName(team) + "/members/" + name
				}
				return api.Members.GetMember(ctx, &pb.GetMemberRequest{Name: name})
			},
			list: func(ctx context.Context, api *client.Client, q listQuery) ([]proto.Message, string, error) {
				r, err := api.Members.ListMembers(ctx, &pb.ListMembersRequest{Parent: teamName(q.team), PageSize: q.size, PageToken: q.token, Filter: q.filter})
				return msgs(r.GetMembers()), r.GetNextPageToken(), err
			},
			wrap: func(items []proto.Message, next string) proto.Message {
				return &pb.ListMembersResponse{Members: typed[*pb.Member](items), NextPageToken: next}
			},
		},
		{
			names: []string{"virtualclusters", "virtualcluster", "vclusters", "vcluster", "vcs", "vc"}, team: "optional", filter: true,
			columns: []string{"NAME", "TEAM", "PHASE", "GPU", "CPU", "MEMORY", "MESSAGE"},
			row: func(m proto.Message) []string {
				v := m.(*pb.VirtualCluster)
				q := v.GetSpec().GetQuota()
				parts := strings.Split(v.GetName(), "/")
				team := ""
				if len(parts) == 4 {
					team = parts[1]
				}
				return []string{lastSegment(v.GetName()), team, v.GetStatus().GetPhase().String(), fmtGPU(q.GetGpu()),
					fmtCPU(q.GetCpuMillis()), fmtMemory(q.GetMemoryBytes()), orDash(v.GetStatus().GetMessage())}
			},
			get: func(ctx context.Context, c *cli, api *client.Client, name, team string) (proto.Message, error) {
				full, err := c.resolveVC(ctx, api, name, team)
				if err != nil {
					return nil, err
				}
				return api.VirtualClusters.GetVirtualCluster(ctx, &pb.GetVirtualClusterRequest{Name: full})
			},
			list: func(ctx context.Context, api *client.Client, q listQuery) ([]proto.Message, string, error) {
				parent := "teams/-"
				if q.team != "" {
					parent = teamName(q.team)
				}
				r, err := api.VirtualClusters.ListVirtualClusters(ctx, &pb.ListVirtualClustersRequest{Parent: parent, PageSize: q.size, PageToken: q.token, Filter: q.filter})
				return msgs(r.GetVirtualClusters()), r.GetNextPageToken(), err
			},
			wrap: func(items []proto.Message, next string) proto.Message {
				return &pb.ListVirtualClustersResponse{VirtualClusters: typed[*pb.VirtualCluster](items), NextPageToken: next}
			},
		},
		{
			names: []string{"requests", "request", "req", "reqs"}, team: "filter", filter: true,
			columns: []string{"NAME", "TEAM", "KIND", "TARGET", "QUOTA", "STATE", "REQUESTER", "DECIDER"},
			row: func(m proto.Message) []string {
				r := m.(*pb.Request)
				target, q := requestTarget(r)
				quota := "-"
				if q != nil {
					quota = fmtQuota(q)
				}
				return []string{lastSegment(r.GetName()), lastSegment(r.GetTeam()), requestKind(r.GetKind()), target, quota,
					r.GetState().String(), orDash(r.GetRequester()), orDash(r.GetDecider())}
			},
			get: func(ctx context.Context, _ *cli, api *client.Client, name, _ string) (proto.Message, error) {
				return api.Requests.GetRequest(ctx, &pb.GetRequestRequest{Name: qualify("requests", name)})
			},
			list: func(ctx context.Context, api *client.Client, q listQuery) ([]proto.Message, string, error) {
				r, err := api.Requests.ListRequests(ctx, &pb.ListRequestsRequest{PageSize: q.size, PageToken: q.token, Filter: q.filter})
				return msgs(r.GetRequests()), r.GetNextPageToken(), err
			},
			wrap: func(items []proto.Message, next string) proto.Message {
				return &pb.ListRequestsResponse{Requests: typed[*pb.Request](items), NextPageToken: next}
			},
		},
		{
			names: []string{"audit", "auditevents", "auditevent", "events"}, team: "filter", filter: true,
			columns: []string{"TIME", "ACTOR", "ACTION", "RESOURCE"},
			row: func(m proto.Message) []string {
				e := m.(*pb.AuditEvent)
				return []string{e.GetTime().AsTime().UTC().Format(time.RFC3339), e.GetActor(), e.GetAction(), orDash(e.GetResource())}
			},
			list: func(ctx context.Context, api *client.Client, q listQuery) ([]proto.Message, string, error) {
				r, err := api.Audit.ListAuditEvents(ctx, &pb.ListAuditEventsRequest{PageSize: q.size, PageToken: q.token, Filter: q.filter})
				return msgs(r.GetAuditEvents()), r.GetNextPageToken(), err
			},
			wrap: func(items []proto.Message, next string) proto.Message {
				return &pb.ListAuditEventsResponse{AuditEvents: typed[*pb.AuditEvent](items), NextPageToken: next}
			},
		},
		{
			names:   []string{"policies", "policy", "approvalpolicies", "approvalpolicy"},
			columns: []string{"NAME", "DISABLED", "EXPRESSION"},
			row: func(m proto.Message) []string {
				p := m.(*pb.ApprovalPolicy)
				return []string{lastSegment(p.GetName()), yesNo(p.GetDisabled()), p.GetExpression()}
			},
			get: func(ctx context.Context, _ *cli, api *client.Client, name, _ string) (proto.Message, error) {
				return api.Policies.GetApprovalPolicy(ctx, &pb.GetApprovalPolicyRequest{Name: qualify("approvalPolicies", name)})
			},
			list: func(ctx context.Context, api *client.Client, q listQuery) ([]proto.Message, string, error) {
				r, err := api.Policies.ListApprovalPolicies(ctx, &pb.ListApprovalPoliciesRequest{PageSize: q.size, PageToken: q.token})
				return msgs(r.GetApprovalPolicies()), r.GetNextPageToken(), err
			},
			wrap: func(items []proto.Message, next string) proto.Message {
				return &pb.ListApprovalPoliciesResponse{ApprovalPolicies: typed[*pb.ApprovalPolicy](items), NextPageToken: next}
			},
		},
	}
}

func findKind(name string) *kind {
	name = strings.ToLower(name)
	for _, k := range kinds() {
		if slices.Contains(k.names, name) {
			return k
		}
	}
	return nil
}

func kindNames() []string {
	var out []string
	for _, k := range kinds() {
		out = append(out, k.names[0])
	}
	return out
}

type getFlags struct {
	team, filter, pageToken string
	pageSize                int32
	all, watch              bool
}

func (c *cli) getCmd() *cobra.Command {
	var f getFlags
	cmd := &cobra.Command{
		Use:     "get KIND [NAME...]",
		Aliases: []string{"list"},
		Short:   "List resources, or show the named ones",
		Long: `List resources of a kind, or show the named ones.

Kinds: ` + strings.Join(kindNames(), ", ") + ` (singulars and vc, req,
dept also work). Names are ids ("team-a") or full resource names
("teams/team-a").`,
		Example: `  gpuplanectl get teams
  gpuplanectl get members --team team-a
  gpuplanectl get vc ml-dev -o yaml
  gpuplanectl list requests --filter 'state = PENDING' --all
  gpuplanectl get audit --filter 'resource = "teams/team-a*"' --page-size 20
  gpuplanectl get vc --team team-a --watch`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usagef("name a kind: %s", strings.Join(kindNames(), ", "))
			}
			if findKind(args[0]) == nil {
				return usagef("unknown kind %q: use one of %s", args[0], strings.Join(kindNames(), ", "))
			}
			return nil
		},
		ValidArgsFunction: func(_ *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
			if len(args) == 0 {
				return kindNames(), cobra.ShellCompDirectiveNoFileComp
			}
			return nil, cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return c.get(cmd.Context(), findKind(args[0]), args[1:], f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.team, "team", "", "team of members (required) and virtual clusters; a filter for requests and audit events")
	fl.StringVar(&f.filter, "filter", "", `AIP-160 filter, e.g. 'state = PENDING AND team = "teams/team-a"'`)
	fl.Int32Var(&f.pageSize, "page-size", 0, "items per page (server default 50, at most 500)")
	fl.StringVar(&f.pageToken, "page-token", "", "continue a previous listing")
	fl.BoolVar(&f.all, "all", false, "follow page tokens until the end")
	fl.BoolVar(&f.watch, "watch", false, "virtualclusters and requests: after the current state, print every change as it happens (until interrupted)")
	return cmd
}

func (c *cli) get(ctx context.Context, k *kind, names []string, f getFlags) error {
	api, err := c.api(ctx)
	if err != nil {
		return err
	}
	if f.watch {
		return c.watchGet(ctx, api, k, names, f)
	}
	if len(names) > 0 {
		if f.filter != "" || f.all || f.pageToken != "" || f.pageSize != 0 {
			return usagef("--filter, --all, --page-size and --page-token are for listing, not for named %s", k.names[0])
		}
		if k.get == nil {
			return usagef("%s can only be listed", k.names[0])
		}
		var items []proto.Message
		for _, n := range names {
			cctx, cancel := c.call(ctx)
			m, err := k.get(cctx, c, api, n, f.team)
			cancel()
			if err != nil {
				return err
			}
			items = append(items, m)
		}
		if len(items) == 1 && c.output != "table" {
			return c.printObject(items[0])
		}
		return c.printItems(k, items, "")
	}

	q := listQuery{size: f.pageSize, token: f.pageToken, filter: f.filter}
	switch k.team {
	case "required":
		if f.team == "" {
			return usagef("--team is required to list %s", k.names[0])
		}
		q.team = f.team
	case "optional":
		q.team = f.team
	case "filter":
		if f.team != "" {
			term := "team = " + strconv.Quote(teamName(f.team))
			if q.filter != "" {
				q.filter = term + " AND " + q.filter
			} else {
				q.filter = term
			}
		}
	default:
		if f.team != "" {
			return usagef("--team does not apply to %s", k.names[0])
		}
	}
	if !k.filter && f.filter != "" {
		return usagef("%s cannot be filtered", k.names[0])
	}
	var items []proto.Message
	for {
		cctx, cancel := c.call(ctx)
		page, next, err := k.list(cctx, api, q)
		cancel()
		if err != nil {
			return err
		}
		items = append(items, page...)
		q.token = next
		if next == "" || !f.all {
			break
		}
	}
	return c.printItems(k, items, q.token)
}

func (c *cli) printItems(k *kind, items []proto.Message, next string) error {
	switch c.output {
	case "json", "yaml":
		return c.printObject(k.wrap(items, next))
	case "name":
		for _, m := range items {
			if n, ok := m.(interface{ GetName() string }); ok {
				fmt.Fprintln(c.stdout(), n.GetName())
			}
		}
	default:
		if len(items) == 0 {
			fmt.Fprintf(c.stderr(), "No %s found.\n", k.names[0])
		} else {
			t := newTable(c.stdout())
			t.row(slices.Clone(k.columns)...)
			for _, m := range items {
				t.row(k.row(m)...)
			}
			if err := t.flush(); err != nil {
				return err
			}
		}
	}
	if next != "" {
		fmt.Fprintf(c.stderr(), "More %s: --page-token %s (or --all).\n", k.names[0], next)
	}
	return nil
}

// resolveVC turns "ml-dev" into teams/{team}/virtualClusters/ml-dev: with
// --team directly, else by looking the id up among the virtual clusters
// the caller can read (ids are unique platform-wide).
func (c *cli) resolveVC(ctx context.Context, api *client.Client, arg, team string) (string, error) {
	if strings.HasPrefix(arg, "teams/") {
		return arg, nil
	}
	if team != "" {
		return teamName(team) + "/virtualClusters/" + arg, nil
	}
	req := &pb.ListVirtualClustersRequest{Parent: "teams/-", PageSize: 500}
	for {
		resp, err := api.VirtualClusters.ListVirtualClusters(ctx, req)
		if err != nil {
			return "", err
		}
		for _, v := range resp.GetVirtualClusters() {
			if lastSegment(v.GetName()) == arg {
				return v.GetName(), nil
			}
		}
		if req.PageToken = resp.GetNextPageToken(); req.PageToken == "" {
			return "", fmt.Errorf("virtual cluster %q not found among those you can read (--team names its team)", arg)
		}
	}
}
