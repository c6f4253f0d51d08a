package client_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"golang.org/x/oauth2"

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

	req := &pb.ListTeamsRequest{PageSize: 100}
	for {
		page, err := c.Teams.ListTeams(ctx, req)
		if err != nil {
			return err
		}
		for _, t := range page.GetTeams() {
			fmt.Println(t.GetName(), t.GetQuota().GetGpu())
		}
		if req.PageToken = page.GetNextPageToken(); req.PageToken == "" {
			break
		}
	}

	_, err = c.Requests.CreateRequest(ctx, &pb.CreateRequestRequest{
		RequestId: "portal-8d2f", // a retry with the same id is answered with the first result
		Request: &pb.Request{Team: "teams/team-a", Payload: &pb.Request_ChangeTeamQuota{
			ChangeTeamQuota: &pb.ChangeTeamQuotaPayload{Quota: &pb.Quota{Gpu: "6", CpuMillis: 32000, MemoryBytes: 256 << 30}},
		}},
	})
	if e, ok := client.AsError(err); ok && e.Reason == "QUOTA_EXCEEDED" {
		fmt.Println("does not fit:", e.Message)
		return nil
	}
	return err
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
