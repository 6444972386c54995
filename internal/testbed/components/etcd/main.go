// Command etcd is a current etcd server, built from source for the local test bed (Debian ships 3.4).
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
