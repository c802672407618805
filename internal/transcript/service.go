package transcript

import (
	"context"
	"maps"
	"slices"

	"github.com/kilnrt/kiln/internal/host"
)

// InstructionsMethod is the host method that resolves a session's header chain.
const InstructionsMethod = "runtime.instructions"

// Instructions is the runtime.instructions service: it replays the session's header
// records on the host and returns the exact current instruction text, with its digest.
// A link that does not reconstruct its text stops the chain at the last text that did:
// complete is then false, and stopped_at_seq and problem say where and why, until a
// later pin or whole-text revision makes the chain whole again. broken_links lists
// every link that does not reconstruct, {seq, problem}, even once the chain is whole.
func Instructions(ctx context.Context, req *host.Request) host.Outcome {
	var none struct{}
	if err := req.Decode(&none); err != nil {
		return host.Reply(host.Error(host.CodeInvalidRequest, "runtime.instructions takes no parameters: %v", err))
	}
	t, err := Load(ctx, req.Router().Store(), req.Session.ID)
	if err != nil {
		return host.Reply(host.Error(host.CodeStoreFailed, "reading the transcript: %v", err))
	}
	res := Resolve(t.Links())
	reply := map[string]any{"text": nil, "digest": nil, "complete": res.Complete}
	if res.Head != nil {
		reply["text"], reply["digest"] = res.Head.Text, res.Head.Digest
		if res.Head.Sources != nil {
			names := make([]string, len(res.Head.Sources))
			for i, s := range res.Head.Sources {
				names[i] = s.Name
			}
			reply["sources"] = names
		}
	}
	if !res.Complete {
		reply["stopped_at_seq"], reply["problem"] = res.StopSeq, res.Problem
	}
	if len(res.Broken) > 0 {
		broken := make([]map[string]any, 0, len(res.Broken))
		for _, seq := range slices.Sorted(maps.Keys(res.Broken)) {
			broken = append(broken, map[string]any{"seq": seq, "problem": res.Broken[seq]})
		}
		reply["broken_links"] = broken
	}
	return host.Reply(host.OK(reply))
}
