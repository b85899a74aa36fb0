package apiserver

import (
	"strings"

	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	tetherv1 "github.com/tetherhq/tether/proto/tether/v1"
)

// strategyFromAPI maps a fleet's strategy to its event form.
func strategyFromAPI(s *tetherv1.FleetStrategy) *eventsv1.FleetStrategy {
	if s == nil {
		return nil
	}
	return &eventsv1.FleetStrategy{Type: eventsv1.FleetStrategy_Type(s.GetType()), MaxSurge: s.GetMaxSurge(),
		MaxUnavailable: s.GetMaxUnavailable(), FailureThreshold: s.GetFailureThreshold()}
}

// strategyToAPI maps a fleet's strategy to the API's form.
func strategyToAPI(s *eventsv1.FleetStrategy) *tetherv1.FleetStrategy {
	if s == nil {
		return nil
	}
	return &tetherv1.FleetStrategy{Type: tetherv1.FleetStrategy_Type(s.GetType()), MaxSurge: s.GetMaxSurge(),
		MaxUnavailable: s.GetMaxUnavailable(), FailureThreshold: s.GetFailureThreshold()}
}

// rolloutToAPI maps a fleet's last rollout to the API's status.
func rolloutToAPI(r *eventsv1.FleetRollout) *tetherv1.RolloutStatus {
	if r == nil {
		return nil
	}
	return &tetherv1.RolloutStatus{State: strings.TrimPrefix(r.GetState().String(), "ROLLOUT_STATE_"), Revision: r.GetRevision(),
		FromRevision: r.GetFromRevision(), Strategy: r.GetStrategy(), Reason: r.GetReason(), Message: r.GetMessage(),
		StartTime: r.GetStartTime(), UpdateTime: r.GetUpdateTime(), Updated: r.GetUpdated(), UpdatedReady: r.GetUpdatedReady(),
		Outdated: r.GetOutdated(), OutdatedBusy: r.GetOutdatedBusy()}
}
