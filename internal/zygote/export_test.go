package zygote

import "context"

// HoldAnswers has each answer of p's zygotes told to hold, which returns when the
// answer may go on.
func HoldAnswers(p *Pool, hold func(ctx context.Context, pid int)) { p.hold = hold }
