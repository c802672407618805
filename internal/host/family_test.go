package host_test

import (
	"context"
	"slices"
	"testing"

	"github.com/kilnrt/kiln/internal/host"
	"github.com/kilnrt/kiln/internal/store"
)

// TestRegisterServesEachMethodWithAServiceOnly registers a family's methods: those with
// a service are served, one without is left out (a cell calling it is answered
// unknown_method).
func TestRegisterServesEachMethodWithAServiceOnly(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, "", store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	sess, _, err := st.EnsureSession(ctx, "test")
	if err != nil {
		t.Fatal(err)
	}
	r := host.New(host.Config{Store: st, Session: sess})
	answer := host.ServiceFunc(func(context.Context, *host.Request) host.Outcome { return host.Reply(host.OK(nil)) })
	r.Register(
		host.Method{Name: "family.queued", Service: answer},
		host.Method{Name: "family.immediate", Immediate: true, Service: answer},
		host.Method{Name: "family.absent"},
	)
	got := r.Methods()
	for _, name := range []string{"family.immediate", "family.queued"} {
		if !slices.Contains(got, name) {
			t.Errorf("methods %v; want %s among them", got, name)
		}
	}
	if slices.Contains(got, "family.absent") {
		t.Errorf("methods %v; want no family.absent, which has no service", got)
	}
}
