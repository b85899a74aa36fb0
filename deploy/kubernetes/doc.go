// Package kubernetes holds Tether's Kubernetes manifests: a kustomize base
// for the control plane (kustomization.yaml), the NATS chart's values
// (nats-values.yaml) and the CloudNativePG cluster (postgres-cluster.yaml).
// It has no Go code: its tests render the base with `kubectl kustomize`
// and check every object against the Kubernetes API types and against the
// tether binary's subcommands and flags (README.md says how to install).
package kubernetes
