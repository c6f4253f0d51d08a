package client

import (
	"context"
	"iter"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	pb "github.com/gpuplane/gpuplane/api/gpuplane/v1"
)

// pagedRequest is a List request: it carries page_token.
type pagedRequest interface {
	proto.Message
	GetPageToken() string
}

// pagedResponse is a List response: it carries next_page_token.
type pagedResponse interface {
	GetNextPageToken() string
}

// Items iterates over every item a List RPC returns, fetching the next page
// when the previous one is used up. req is not modified (a copy carries the
// page tokens); its page_size, filter and parent apply to every page. The
// iteration stops at the first error, which it yields with a nil item;
// breaking out of the loop fetches no further page.
//
//	for team, err := range client.Items(ctx, c.Teams.ListTeams, &gpuplanev1.ListTeamsRequest{}, (*gpuplanev1.ListTeamsResponse).GetTeams) {
//		if err != nil { return err }
//		fmt.Println(team.GetName())
//	}
//
// The typed helpers of Client (AllTeams, AllVirtualClusters, ...) call it.
func Items[Req pagedRequest, Resp pagedResponse, Item any](
	ctx context.Context,
	list func(context.Context, Req, ...grpc.CallOption) (Resp, error),
	req Req,
	items func(Resp) []Item,
	opts ...grpc.CallOption,
) iter.Seq2[Item, error] {
	return func(yield func(Item, error) bool) {
		var zero Item
		page := proto.Clone(req).(Req)
		token := page.ProtoReflect().Descriptor().Fields().ByName("page_token")
		for {
			resp, err := list(ctx, page, opts...)
			if err != nil {
				yield(zero, err)
				return
			}
			for _, it := range items(resp) {
				if !yield(it, nil) {
					return
				}
			}
			next := resp.GetNextPageToken()
			if next == "" {
				return
			}
			page.ProtoReflect().Set(token, protoreflect.ValueOfString(next))
		}
	}
}

// AllDepartments iterates over every department req selects (Items).
func (c *Client) AllDepartments(ctx context.Context, req *pb.ListDepartmentsRequest, opts ...grpc.CallOption) iter.Seq2[*pb.Department, error] {
	return Items(ctx, c.Departments.ListDepartments, req, (*pb.ListDepartmentsResponse).GetDepartments, opts...)
}

// AllTeams iterates over every team req selects (Items).
func (c *Client) AllTeams(ctx context.Context, req *pb.ListTeamsRequest, opts ...grpc.CallOption) iter.Seq2[*pb.Team, error] {
	return Items(ctx, c.Teams.ListTeams, req, (*pb.ListTeamsResponse).GetTeams, opts...)
}

// AllMembers iterates over every member of req.Parent (Items).
func (c *Client) AllMembers(ctx context.Context, req *pb.ListMembersRequest, opts ...grpc.CallOption) iter.Seq2[*pb.Member, error] {
	return Items(ctx, c.Members.ListMembers, req, (*pb.ListMembersResponse).GetMembers, opts...)
}

// AllVirtualClusters iterates over every virtual cluster of req.Parent
// ("teams/-" for every team the caller reads) (Items).
func (c *Client) AllVirtualClusters(ctx context.Context, req *pb.ListVirtualClustersRequest, opts ...grpc.CallOption) iter.Seq2[*pb.VirtualCluster, error] {
	return Items(ctx, c.VirtualClusters.ListVirtualClusters, req, (*pb.ListVirtualClustersResponse).GetVirtualClusters, opts...)
}

// AllRequests iterates over every request req selects (Items).
func (c *Client) AllRequests(ctx context.Context, req *pb.ListRequestsRequest, opts ...grpc.CallOption) iter.Seq2[*pb.Request, error] {
	return Items(ctx, c.Requests.ListRequests, req, (*pb.ListRequestsResponse).GetRequests, opts...)
}

// AllApprovalPolicies iterates over every approval policy req selects (Items).
func (c *Client) AllApprovalPolicies(ctx context.Context, req *pb.ListApprovalPoliciesRequest, opts ...grpc.CallOption) iter.Seq2[*pb.ApprovalPolicy, error] {
	return Items(ctx, c.Policies.ListApprovalPolicies, req, (*pb.ListApprovalPoliciesResponse).GetApprovalPolicies, opts...)
}

// AllAuditEvents iterates over every audit event req selects, newest
// first (Items).
func (c *Client) AllAuditEvents(ctx context.Context, req *pb.ListAuditEventsRequest, opts ...grpc.CallOption) iter.Seq2[*pb.AuditEvent, error] {
	return Items(ctx, c.Audit.ListAuditEvents, req, (*pb.ListAuditEventsResponse).GetAuditEvents, opts...)
}
