//go:build unix && !linux

package pgtemp

import "syscall"

// sysProcAttr runs a child as cred (nil: this process's user) in a process
// group of its own. There is no parent-death signal outside Linux: a server
// whose parent is killed without calling Stop keeps running.
func sysProcAttr(cred *syscall.Credential, _ syscall.Signal) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: cred, Setpgid: true}
}
