// Command terraform-provider-outpost serves the Outpost Terraform provider over plugin protocol 6.
package main

import (
	"context"
	"flag"
	"log"

	"github.com/hashicorp/terraform-plugin-framework/providerserver"

	"github.com/outpost-dev/terraform-provider-outpost/internal/provider"
	"github.com/outpost-dev/terraform-provider-outpost/internal/version"
)

func main() {
	var debug bool
	flag.BoolVar(&debug, "debug", false, "set to true to run the provider with support for debuggers like delve")
	flag.Parse()

	opts := providerserver.ServeOpts{
		Address:         "registry.terraform.io/outpost-dev/outpost",
		Debug:           debug,
		ProtocolVersion: 6,
	}
	if err := providerserver.Serve(context.Background(), provider.New(version.Version), opts); err != nil {
		log.Fatal(err.Error())
	}
}
