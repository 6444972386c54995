// Command terraform-provider-outpost serves the Outpost Terraform provider over plugin protocol 6.
package main

import (
	"context"
	"flag"
	"log"

	"github.com/hashicorp/terraform-plugin-framework/providerserver"

	"github.com/outpost-dev/terraform-provider-outpost/internal/provider"
)

// version is set by goreleaser (-X main.version=...) to the release version.
var version = "dev"

func main() {
	var debug bool
	flag.BoolVar(&debug, "debug", false, "set to true to run the provider with support for debuggers like delve")
	flag.Parse()

	opts := providerserver.ServeOpts{
		Address:         "registry.terraform.io/outpost-dev/outpost",
		Debug:           debug,
		ProtocolVersion: 6,
	}
	if err := providerserver.Serve(context.Background(), provider.New(version), opts); err != nil {
		log.Fatal(err.Error())
	}
}
