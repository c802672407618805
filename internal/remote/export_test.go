package remote

// ProblemCodes are the daemon's problem codes the client tells apart, for the test
// that holds them to the API's own (problems_test.go), which imports the API and so
// cannot be of this package.
var ProblemCodes = map[string]string{"no_session": problemNoSession, "no_execution": problemNoExecution,
	"exists": problemExists, "stopped": problemStopped, "busy": problemBusy, "not_running": problemNotRunning}
