package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"golang.org/x/oauth2"
	"google.golang.org/protobuf/proto"

	pb "github.com/gpuplane/gpuplane/api/gpuplane/v1"
	"github.com/gpuplane/gpuplane/pkg/client"
)

// Connect with an ID token, list the caller's teams page by page, and
// react to a quota refusal by its stable reason.
func Example() {
	if err := listAndAsk(context.Background()); err != nil {
		log.Fatal(err)
	}
}

func listAndAsk(ctx context.Context) error {
	c, err := client.New(ctx, client.Config{
		Address:   "localhost:9090",
		Insecure:  true, // plaintext, local development only
		TokenFunc: client.StaticToken(os.Getenv("GPUPLANE_TOKEN")),
		UserAgent: "my-portal/1.0",
	})
	if err != nil {
		return err
	}
	defer c.Close()

	me, err := c.Identity.GetCurrentUser(ctx, &pb.GetCurrentUserRequest{})
	if err != nil {
		return err
	}
	fmt.Println("hello", me.GetUsername())

	// Every team, page after page.
	for t, err := range c.AllTeams(ctx, &pb.ListTeamsRequest{PageSize: 100}) {
		if err != nil {
			return err
		}
		fmt.Println(t.GetName(), t.GetQuota().GetGpu())
	}

	_, err = c.Requests.CreateRequest(ctx, &pb.CreateRequestRequest{
		RequestId: "portal-8d2f", // a retry with the same id is answered with the first result
		Request: &pb.Request{Team: "teams/team-a", Payload: &pb.Request_ChangeTeamQuota{
			ChangeTeamQuota: &pb.ChangeTeamQuotaPayload{Quota: &pb.Quota{Gpu: "6", CpuMillis: 32000, MemoryBytes: 256 << 30}},
		}},
	})
	if client.IsQuotaExceeded(err) {
		e, _ := client.AsError(err)
		fmt.Println("does not fit:", e.Message, e.Metadata)
		return nil
	}
	return err
}

// Ask for a virtual cluster and wait until it is READY, as
// `gpuplanectl request vcluster --wait` does.
func ExampleClient_WaitForVirtualCluster() {
	if err := askAndWait(context.Background()); err != nil {
		log.Fatal(err)
	}
}

func askAndWait(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	c, err := client.New(ctx, client.Config{Address: "localhost:9090", Insecure: true, TokenFunc: client.StaticToken(os.Getenv("GPUPLANE_TOKEN"))})
	if err != nil {
		return err
	}
	defer c.Close()
	r, err := c.Requests.CreateRequest(ctx, &pb.CreateRequestRequest{Request: &pb.Request{Team: "teams/team-a",
		Payload: &pb.Request_CreateVirtualCluster{CreateVirtualCluster: &pb.CreateVirtualClusterPayload{
			VirtualClusterId: "ml-dev", Spec: &pb.VirtualClusterSpec{Quota: &pb.Quota{Gpu: "1", Cpu: proto.String("8"), Memory: proto.String("32Gi")}}}}}})
	if err != nil {
		return err
	}
	vc, err := c.WaitForVirtualCluster(ctx, r.GetCreateVirtualCluster().GetVirtualCluster(), client.WaitOptions{
		Progress: func(vc *pb.VirtualCluster) { fmt.Println(vc.GetStatus().GetPhase()) },
	})
	var notReachable *client.NotReachableError
	if errors.As(err, &notReachable) {
		return fmt.Errorf("it will not be READY: %w", err) // rejected, failed or deleted
	}
	if err != nil {
		return err
	}
	fmt.Println(vc.GetStatus().GetEndpoint())
	return nil
}

// An OIDC token source (e.g. from golang.org/x/oauth2 after a login)
// refreshes itself; the ID token it carries is sent on every call.
func Example_tokenSource() {
	conf := &oauth2.Config{ClientID: "gpuplanectl", Endpoint: oauth2.Endpoint{TokenURL: "https://issuer.example.com/oauth/token"}}
	saved := &oauth2.Token{RefreshToken: os.Getenv("REFRESH_TOKEN")}
	c, err := client.New(context.Background(), client.Config{
		Address:     "gpuplane.example.com:443",
		TokenSource: conf.TokenSource(context.Background(), saved),
	})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
}
