module fleetprof/hostile/cgo

go 1.21
