package host

import "strconv"

// Evidence references: how a record is named to an agent.

// EventRef names event id: "event:42".
func EventRef(id int64) string { return "event:" + strconv.FormatInt(id, 10) }

// RequestRef names request id: "request:7".
func RequestRef(id int64) string { return "request:" + strconv.FormatInt(id, 10) }

// ExecutionRef names an execution: "execution:c-3".
func ExecutionRef(id string) string { return "execution:" + id }

// WaitRef names wait id: "wait:3".
func WaitRef(id int64) string { return "wait:" + strconv.FormatInt(id, 10) }

// EffectRef names effect id: "effect:3".
func EffectRef(id int64) string { return "effect:" + strconv.FormatInt(id, 10) }
