// Package systemd holds Tether's systemd units: the control plane
// (tether-apiserver, tether-projector, tether-controller, and
// tether-migrate, run once per upgrade), the host agent (tether-agent), and
// their environment file (tether.env). It has no Go code: its tests parse
// each unit and check its sandbox and its command line against the tether
// binary's subcommands and flags (README.md says how to install).
package systemd
