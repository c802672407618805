package session

import "fmt"

// limit adds a session's limits to the policy of its children: the memory and the
// number of tasks each generation and each workspace command may use. Those the
// worker applies itself (the address space, a cell's CPU time) need no mechanism of
// the sandbox's; the number of tasks does: a profile that confines nothing makes no
// cgroup to count them in, and refuses it.
func (c *Confinement) limit(memory int64, cpuSeconds, processes int) error {
	switch {
	case memory < 0:
		return fmt.Errorf("%w: memory %d bytes is negative", ErrLimitUnavailable, memory)
	case cpuSeconds < 0:
		return fmt.Errorf("%w: %d CPU-seconds is negative", ErrLimitUnavailable, cpuSeconds)
	case processes < 0:
		return fmt.Errorf("%w: max_processes %d is negative", ErrLimitUnavailable, processes)
	case processes > 0 && !c.Policy.Profile.Confines():
		return fmt.Errorf("%w: max_processes %d needs a confining sandbox (workspace or strict), whose cgroup counts the tasks; "+
			"sandbox %s makes none", ErrLimitUnavailable, processes, c.Policy.Profile)
	}
	c.Policy.MemoryBytes = memory
	c.Policy.MaxProcesses = processes
	return nil
}
