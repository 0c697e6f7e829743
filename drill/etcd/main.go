// Command etcd runs etcd's own entry point (etcdmain.Main) from the server module: the module proxy serves
// go.etcd.io/etcd/server/v3 but its binary's main package lives in the repository root, outside the module.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
