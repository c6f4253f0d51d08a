// Command webhook-receiver prints the gpuplane webhook deliveries it
// receives after checking their Standard Webhooks signature (the README
// walkthrough runs it). A real receiver would also drop events it has seen
// (deliveries are at-least-once; the id stays the same on retries).
//
//	go run ./examples/webhook-receiver --addr 127.0.0.1:9999 --secret whsec_...
package main

import (
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"time"

	"github.com/gpuplane/gpuplane/pkg/client"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:9999", "listen address")
	secret := flag.String("secret", os.Getenv("WEBHOOK_SECRET"), "the subscription's secret (whsec_...; env WEBHOOK_SECRET)")
	flag.Parse()
	if *secret == "" {
		log.Fatal("--secret is required (the secret the subscription's creation returned)")
	}
	http.Handle("/hook", client.WebhookHandler(func(_ *http.Request, ev *client.WebhookEvent) error {
		fmt.Printf("%s  %-36s %-40s by %s (id %s, position %s)\n", ev.Time.Format(time.TimeOnly), ev.Type, ev.Subject,
			ev.Data.Actor, ev.ID, ev.Position)
		return nil
	}, *secret))
	log.Printf("receiving webhooks on http://%s/hook", *addr)
	srv := &http.Server{Addr: *addr, ReadHeaderTimeout: 10 * time.Second}
	log.Fatal(srv.ListenAndServe())
}
