// Command etcd is etcd's own entry point, built from the pinned server module
// because no registry this project can reach ships etcd binaries.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
