// Package e2e tests the agent binary end to end: a real reference orchestrator over HTTP, a real
// Kubernetes API server with the Job controller, scheduler and kwok (internal/testbed), and the
// outpost-agent binary built by the test and run as a subprocess, so faults can be real
// (SIGKILL, an orchestrator that goes away, two replicas racing for the Lease).
package e2e
