// Package pods tests the agent end to end on real pods: the test bed's real node (containerd,
// runc, the kubelet; internal/testbed) runs the agent from its image, installed by the chart
// with the pods the chart creates, and every deployment runs as a Job whose pods really run
// Terraform or OpenTofu. The orchestrator is the reference one, listening on the test bed's
// HostIP so the pods reach it.
//
// The images are the product's (tools/image/recipe), built once per test binary for this
// machine's platform only and imported into the node once. A "terraform" image the test makes
// from the job image's Debian layers plus this machine's /usr/local/bin/terraform (the release
// binary is static) shows that main runs any CLI image, without an Outpost binary of its own.
package pods
