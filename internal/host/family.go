package host

// Method is one host request method as its family offers it: the name cells call, how
// the router serves it, and its service. A family's package builds its methods with a
// function of its own (Methods, by convention) from the parts of the session it needs,
// and the session registers them with Register: adding a method to a family touches
// only the family's package.
type Method struct {
	// Name is the method as cells call it: await runtime.<Name>(…).
	Name string
	// Immediate methods are answered on the worker's reading goroutine, in the order
	// they arrive: they change nothing another request reads, so they need no turn in
	// the router's queue (see HandleImmediate).
	Immediate bool
	// Service serves the method. Nil leaves it out: a cell that calls it is answered
	// unknown_method.
	Service Service
}

// Register adds each of methods to r, as Handle or HandleImmediate would; one with a nil
// Service is left out.
func (r *Router) Register(methods ...Method) {
	for _, m := range methods {
		switch {
		case m.Service == nil:
		case m.Immediate:
			r.HandleImmediate(m.Name, m.Service)
		default:
			r.Handle(m.Name, m.Service)
		}
	}
}
