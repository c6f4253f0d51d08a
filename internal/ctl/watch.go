package ctl

import (
	"context"
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	pb "github.com/gpuplane/gpuplane/api/gpuplane/v1"
	"github.com/gpuplane/gpuplane/pkg/client"
)

// waitReady follows the virtual cluster through a watch (no polling) and
// prints a line whenever it changes, until it is READY, fails, or the
// timeout passes. Servers without watches are polled instead.
func (c *cli) waitReady(ctx context.Context, api *client.Client, vcName, reqName string, w waitFlags) error {
	p := &waitProgress{start: c.opts.Now(), vcName: vcName}
	ctx, cancel := context.WithTimeout(ctx, w.timeout)
	defer cancel()
	team, _, _ := strings.Cut(vcName, "/virtualClusters/")
	for ev, err := range api.WatchVirtualClusters(ctx, &pb.WatchVirtualClustersRequest{Parent: team}) {
		if err != nil {
			if status.Code(err) == codes.Unimplemented {
				return c.waitPolling(ctx, api, vcName, reqName, w, p)
			}
			if waitEnded(ctx, err) {
				break
			}
			return err
		}
		if ev.GetVirtualCluster().GetName() != vcName {
			continue
		}
		if done, err := c.waitStep(ctx, api, ev.GetVirtualCluster(), reqName, p); done || err != nil {
			return err
		}
	}
	return p.ended(ctx, w)
}

// watchable are the kinds get --watch follows.
var watchable = map[string]bool{"virtualclusters": true, "requests": true}

// watchGet lists the kind (the current state) and then prints every
// change until interrupted: a table row per change, or one JSON object
// per line (-o json: the watch events themselves).
func (c *cli) watchGet(ctx context.Context, api *client.Client, k *kind, names []string, f getFlags) error {
	if !watchable[k.names[0]] {
		return usagef("--watch works for virtualclusters and requests, not %s", k.names[0])
	}
	if f.filter != "" || f.all || f.pageToken != "" || f.pageSize != 0 {
		return usagef("--watch takes --team only (no --filter or paging)")
	}
	if c.output == "yaml" {
		return usagef("--watch prints tables, names or JSON lines (-o json), not yaml")
	}
	want := map[string]bool{}
	for _, n := range names {
		want[lastSegment(n)] = true
	}
	team := "teams/-"
	if f.team != "" {
		team = teamName(f.team)
	}
	var header []string
	var widths []int
	show := func(ev proto.Message, obj proto.Message, name, change string) error {
		if len(want) > 0 && !want[lastSegment(name)] {
			return nil
		}
		switch c.output {
		case "json":
			raw, err := protojson.Marshal(ev)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintln(c.stdout(), string(raw))
			return err
		case "name":
			_, err := fmt.Fprintln(c.stdout(), name)
			return err
		}
		if header == nil {
			header = append([]string{"EVENT"}, k.columns...)
			widths = make([]int, len(header))
			for i, h := range header {
				widths[i] = max(len(h), 12)
			}
			printAligned(c, header, widths)
		}
		printAligned(c, append([]string{change}, k.row(obj)...), widths)
		return nil
	}
	change := func(kind pb.WatchEventKind, typ string) string {
		if kind == pb.WatchEventKind_EXISTING {
			return "existing"
		}
		return typ
	}
	if k.names[0] == "virtualclusters" {
		for ev, err := range api.WatchVirtualClusters(ctx, &pb.WatchVirtualClustersRequest{Parent: team}) {
			if err != nil {
				return err
			}
			if ev.GetVirtualCluster() == nil {
				continue
			}
			if err := show(ev, ev.GetVirtualCluster(), ev.GetVirtualCluster().GetName(), change(ev.GetKind(), ev.GetType())); err != nil {
				return err
			}
		}
		return nil
	}
	req := &pb.WatchRequestsRequest{}
	if f.team != "" {
		req.Team = teamName(f.team)
	}
	for ev, err := range api.WatchRequests(ctx, req) {
		if err != nil {
			return err
		}
		if ev.GetRequest() == nil {
			continue
		}
		if err := show(ev, ev.GetRequest(), ev.GetRequest().GetName(), change(ev.GetKind(), ev.GetType())); err != nil {
			return err
		}
	}
	return nil
}

// printAligned prints one table row at fixed widths (a stream cannot be
// aligned after the fact); a wider cell widens its column from then on.
func printAligned(c *cli, cells []string, widths []int) {
	var b strings.Builder
	for i, cell := range cells {
		cell = strings.NewReplacer("\t", " ", "\n", " ").Replace(cell)
		if i < len(widths) {
			widths[i] = max(widths[i], len(cell))
		}
		if i == len(cells)-1 {
			b.WriteString(cell)
		} else {
			fmt.Fprintf(&b, "%-*s   ", widths[i], cell)
		}
	}
	fmt.Fprintln(c.stdout(), strings.TrimRight(b.String(), " "))
}
