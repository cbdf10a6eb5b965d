// Command etcd is the etcd server, built from the published go.etcd.io/etcd/server/v3 module.
// The server module's own main cannot be `go install`ed because its go.mod has replace
// directives, so scripts/build-control-plane.sh builds this wrapper instead.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
