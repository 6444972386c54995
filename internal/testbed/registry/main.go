// Command registry is the test bed's OCI registry: distribution's registry (the CNCF
// Distribution project, what Docker Hub, GitLab and Harbor run), built from its Go module with
// only what the test bed uses linked in: the filesystem storage driver and htpasswd basic auth.
package main

import (
	_ "github.com/distribution/distribution/v3/registry/auth/htpasswd"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/filesystem"

	"github.com/distribution/distribution/v3/registry"
)

func main() {
	// Errors are printed by the command itself; a failed start exits non-zero there.
	_ = registry.RootCmd.Execute()
}
