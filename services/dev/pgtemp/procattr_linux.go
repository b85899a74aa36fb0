package pgtemp

import "syscall"

// sysProcAttr runs a child as cred (nil: this process's user) in a process
// group of its own, and has the kernel send it deathSig when its parent
// goes away.
func sysProcAttr(cred *syscall.Credential, deathSig syscall.Signal) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: cred, Setpgid: true, Pdeathsig: deathSig}
}
