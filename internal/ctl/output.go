package ctl

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/yaml"

	pb "github.com/gpuplane/gpuplane/api/gpuplane/v1"
)

// table writes aligned columns the way kubectl does.
type table struct{ w *tabwriter.Writer }

func newTable(out io.Writer) *table {
	return &table{w: tabwriter.NewWriter(out, 0, 8, 3, ' ', 0)}
}

func (t *table) row(cells ...string) {
	for i, c := range cells {
		cells[i] = strings.NewReplacer("\t", " ", "\n", " ").Replace(c)
	}
	fmt.Fprintln(t.w, strings.Join(cells, "\t"))
}

func (t *table) flush() error { return t.w.Flush() }

// marshalJSON is protojson (REST field names) with stable formatting:
// protojson varies its whitespace on purpose.
func marshalJSON(m proto.Message) ([]byte, error) {
	raw, err := protojson.Marshal(m)
	if err != nil {
		return nil, err
	}
	var compact, out bytes.Buffer
	if err := json.Compact(&compact, raw); err != nil {
		return nil, err
	}
	if err := json.Indent(&out, compact.Bytes(), "", "  "); err != nil {
		return nil, err
	}
	out.WriteByte('\n')
	return out.Bytes(), nil
}

// printObject prints one message as -o json or yaml (or its name).
func (c *cli) printObject(m proto.Message) error {
	switch c.output {
	case "name":
		if n, ok := m.(interface{ GetName() string }); ok {
			_, err := fmt.Fprintln(c.stdout(), n.GetName())
			return err
		}
		return usagef("-o name is not available here")
	case "yaml":
		raw, err := marshalJSON(m)
		if err != nil {
			return err
		}
		out, err := yaml.JSONToYAML(raw)
		if err != nil {
			return err
		}
		_, err = c.stdout().Write(out)
		return err
	default:
		raw, err := marshalJSON(m)
		if err != nil {
			return err
		}
		_, err = c.stdout().Write(raw)
		return err
	}
}

// Quantities as people write them: CPU "16" or "500m", memory "64Gi".
func fmtCPU(millis int64) string {
	return resource.NewMilliQuantity(millis, resource.DecimalSI).String()
}

func fmtMemory(bytes int64) string {
	return resource.NewQuantity(bytes, resource.BinarySI).String()
}

func fmtGPU(gpu string) string {
	if gpu == "" {
		return "0"
	}
	return gpu
}

func fmtQuota(q *pb.Quota) string {
	if q == nil {
		return "-"
	}
	return fmt.Sprintf("gpu=%s cpu=%s memory=%s", fmtGPU(q.GetGpu()), fmtCPU(q.GetCpuMillis()), fmtMemory(q.GetMemoryBytes()))
}

func parseCPU(flag, s string) (int64, error) {
	q, err := resource.ParseQuantity(s)
	if err != nil || q.Sign() < 0 {
		return 0, usagef("--%s %q: a CPU amount such as 16 or 500m", flag, s)
	}
	return q.MilliValue(), nil
}

func parseMemory(flag, s string) (int64, error) {
	q, err := resource.ParseQuantity(s)
	if err != nil || q.Sign() < 0 {
		return 0, usagef("--%s %q: a memory amount such as 64Gi or 512Mi", flag, s)
	}
	return q.Value(), nil
}

// lastSegment is the id at the end of a resource name.
func lastSegment(name string) string {
	if i := strings.LastIndexByte(name, '/'); i >= 0 {
		return name[i+1:]
	}
	return name
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
