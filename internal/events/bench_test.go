package events_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/gpuplane/gpuplane/internal/events"
	"github.com/gpuplane/gpuplane/internal/store"
)

// BenchmarkSequencerPass: one pass that positions 10 new events, after a
// history of 1,000 and of 100,000 positioned ones. A pass must cost the
// same whatever the history (it runs after every burst of commits); the
// ratio is printed.
func BenchmarkSequencerPass(b *testing.B) {
	perPass := map[int]float64{}
	for _, history := range []int{1_000, 100_000} {
		b.Run(fmt.Sprintf("history=%d", history), func(b *testing.B) {
			f := newFeed(b)
			ctx := context.Background()
			seq := f.sequencer(events.SequencerConfig{})
			// The history: audit rows written in bulk (a fixture, not what
			// is measured), then positioned, vacuumed and checkpointed so
			// that the bulk load's work does not land in the timed passes.
			if _, err := f.db.Exec(ctx, `INSERT INTO audit_events (actor, action, resource, event_type)
				SELECT 'bench', 'UpdateTeam', 'teams/t' || g, 'gpuplane.team.updated' FROM generate_series(1, $1::int) g`, history); err != nil {
				b.Fatal(err)
			}
			for {
				p, err := seq.Pass(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if p.Positioned() == 0 {
					break
				}
			}
			for _, sql := range []string{`VACUUM ANALYZE audit_events, event_positions`, `CHECKPOINT`} {
				if _, err := f.db.Exec(ctx, sql); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			for i := range b.N {
				b.StopTimer()
				for j := range 10 {
					if err := f.db.InTx(ctx, store.TxOptions{}, func(ctx context.Context, tx *store.Tx) error {
						return record(ctx, tx, "teams/new", i*10+j)
					}); err != nil {
						b.Fatal(err)
					}
				}
				b.StartTimer()
				p, err := seq.Pass(ctx)
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if p.Positioned() != 10 {
					b.Fatalf("pass positioned %d events, want 10", p.Positioned())
				}
				b.StartTimer()
			}
			perPass[history] = float64(b.Elapsed().Microseconds()) / float64(b.N)
		})
	}
	if small, ok := perPass[1_000]; ok && small > 0 {
		if large, ok := perPass[100_000]; ok {
			fmt.Printf("BenchmarkSequencerPass: a pass after 100,000 events costs %.2fx one after 1,000 (%.0f us vs %.0f us)\n",
				large/small, large, small)
		}
	}
}
