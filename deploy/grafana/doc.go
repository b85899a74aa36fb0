// Package grafana holds Tether's Grafana dashboards (dashboards/*.json),
// its Prometheus alert rules and an example Prometheus configuration
// (prometheus/), and Grafana provisioning files (provisioning/); README.md
// says how to load them. It has no Go code: its tests check the files'
// shape (every panel and rule well formed, every alert with a duration,
// a severity and a runbook, documented in docs/observability.md). That
// every metric they use is one Tether registers is checked against a
// running Tether by services/dev's TestMetricsServedAndUsedByTheDashboards.
package grafana
