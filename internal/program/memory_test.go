package program

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kilnrt/kiln/internal/lossless"
)

// Host memory under many concurrent binding calls is measured in a host process of its
// own, this test binary run again: VmHWM, the peak resident set, is a process's whole
// life.
const memoryHostEnv = "KILN_TEST_MEMORY_HOST" // "scenario calls"

// hostMemoryBound is what a host may reach under the scenarios: 256 MB of its own
// plus the declared budgets, the reply queue and the conversions.
const hostMemoryBound = 256<<20 + MaxReplyQueueBytes + MaxConvertBytes

// memoryScenarios are the programs and bindings measured: a binding returning 4 MiB
// of its own each call to a program that does not read its replies, and one returning
// the same nested 1 MiB array each call to a program that does.
var memoryScenarios = map[string]struct {
	binding func() Func
	source  string
	want    Status
}{
	"unread-4MiB": {
		binding: func() Func {
			return func(context.Context, lossless.Value) (lossless.Value, error) {
				return lossless.String(strings.Repeat("x", 4<<20)), nil
			}
		},
		source: `import asyncio, time
tasks = [asyncio.ensure_future(t.f()) for _ in range(CALLS)]
await asyncio.sleep(0)
await asyncio.sleep(0)
time.sleep(3600)`,
		want: StatusWorkerExit,
	},
	"shared-nested-1MiB": {
		binding: func() Func {
			// 64 chains 64 deep, each ending in 16 KiB of text: 1 MiB of JSON, which the
			// child decodes into few objects, so that a loaded machine keeps up.
			chain := lossless.Value(lossless.String(strings.Repeat("x", 16<<10)))
			for range 64 {
				chain = lossless.Array{chain}
			}
			v := make(lossless.Array, 64)
			for i := range v {
				v[i] = chain
			}
			return func(context.Context, lossless.Value) (lossless.Value, error) { return v, nil }
		},
		source: `import asyncio
async def one():
    await t.f()
    return 1
return sum(await asyncio.gather(*[one() for _ in range(CALLS)]))`,
		want: StatusOK,
	},
}

// TestMemoryHost is the host process of TestHostMemoryUnderConcurrentCalls: it runs
// one scenario and prints its VmHWM.
func TestMemoryHost(t *testing.T) {
	spec := os.Getenv(memoryHostEnv)
	if spec == "" {
		t.Skip("run by TestHostMemoryUnderConcurrentCalls")
	}
	name, calls, _ := strings.Cut(spec, " ")
	sc := memoryScenarios[name]
	r := newRunner(t, Options{})
	if sc.want == StatusOK {
		r.stall = 10 * time.Minute // a child decoding its replies on a loaded machine reads slowly
	}
	res, err := r.Run(context.Background(), Program{
		Source:     strings.ReplaceAll(sc.source, "CALLS", calls),
		Namespaces: []Namespace{{Global: "t", Funcs: map[string]Func{"f": sc.binding()}}},
		Limits:     Limits{Wall: 3 * time.Minute, AddressSpaceBytes: 2 << 30},
	})
	if err != nil {
		t.Fatal(err)
	}
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(status)) {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			fmt.Printf("RESULT %s %s %s\n", res.Status, strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), strings.ReplaceAll(res.Error, "\n", " "))
		}
	}
}

// TestHostMemoryUnderConcurrentCalls runs each scenario with 16, 64 and 256 calls at
// once in a host of its own, and holds its peak resident set to hostMemoryBound: the
// replies are reserved before their calls start, and the conversions are bounded in
// bytes together, not each on its own.
func TestHostMemoryUnderConcurrentCalls(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a host per scenario")
	}
	for _, name := range []string{"unread-4MiB", "shared-nested-1MiB"} {
		for _, calls := range []int{16, 64, 256} {
			t.Run(fmt.Sprintf("%s/%d", name, calls), func(t *testing.T) {
				cmd := exec.Command(os.Args[0], "-test.run=^TestMemoryHost$", "-test.count=1")
				cmd.Env = append(os.Environ(), memoryHostEnv+"="+name+" "+strconv.Itoa(calls))
				out, err := cmd.CombinedOutput()
				if err != nil {
					t.Fatalf("host: %v\n%s", err, out)
				}
				var status string
				var kb int
				for line := range strings.Lines(string(out)) {
					if rest, ok := strings.CutPrefix(line, "RESULT "); ok {
						fields := strings.Fields(rest)
						status = fields[0]
						kb, _ = strconv.Atoi(fields[1])
					}
				}
				if want := memoryScenarios[name].want; Status(status) != want {
					t.Errorf("status %s; want %s\n%s", status, want, out)
				}
				t.Logf("VmHWM %d MiB (bound %d MiB)", kb>>10, hostMemoryBound>>20)
				if kb == 0 || kb<<10 > hostMemoryBound {
					t.Errorf("host peak RSS %d KiB; want at most %d", kb, hostMemoryBound>>10)
				}
			})
		}
	}
}
