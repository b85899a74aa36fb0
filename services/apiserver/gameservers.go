package apiserver

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/projections/postgres"
	tetherv1 "github.com/tetherhq/tether/proto/tether/v1"
)

// gameServerService implements tetherv1.GameServerServiceServer.
type gameServerService struct {
	tetherv1.UnimplementedGameServerServiceServer
	s *Server
}

func (g *gameServerService) GetGameServer(ctx context.Context, req *tetherv1.GetGameServerRequest) (*tetherv1.GameServer, error) {
	if _, _, err := events.ParseGameServerName(req.GetName()); err != nil {
		return nil, invalidField("name", err.Error())
	}
	if err := g.s.waitFresh(ctx, uint64(max(req.GetMinSequence(), 0))); err != nil {
		return nil, err
	}
	row, err := g.s.opts.Views.GameServer(ctx, req.GetName())
	if err != nil {
		return nil, err
	}
	return gameServerToAPI(row.State, row.Sequence), nil
}

func (g *gameServerService) ListGameServers(ctx context.Context, req *tetherv1.ListGameServersRequest) (*tetherv1.ListGameServersResponse, error) {
	q, err := parseGameServerFilter(req.GetFilter())
	if err != nil {
		return nil, err
	}
	if req.GetParent() != "fleets/-" {
		if _, err := events.ParseFleetName(req.GetParent()); err != nil {
			return nil, invalidField("parent", err.Error())
		}
		q.Fleet = req.GetParent()
	}
	size, err := pageSize(req.GetPageSize())
	if err != nil {
		return nil, err
	}
	key := req.GetParent() + "?" + req.GetFilter()
	if q.After, err = decodePageToken(req.GetPageToken(), key); err != nil {
		return nil, err
	}
	if err := g.s.waitFresh(ctx, uint64(max(req.GetMinSequence(), 0))); err != nil {
		return nil, err
	}
	q.Limit = size + 1
	rows, err := g.s.opts.Views.ListGameServers(ctx, q)
	if err != nil {
		return nil, err
	}
	resp := &tetherv1.ListGameServersResponse{}
	for i, r := range rows {
		if i == size {
			resp.NextPageToken = encodePageToken(rows[i-1].State.GetName(), key)
			break
		}
		resp.GameServers = append(resp.GameServers, gameServerToAPI(r.State, r.Sequence))
	}
	return resp, nil
}

// filterFields lists the fields ListGameServers filters on, with their
// allowed values (nil: any resource name).
var filterFields = map[string][]string{
	"state":      enumNames(tetherv1.GameServer_State_name),
	"health":     enumNames(tetherv1.HealthStatus_State_name),
	"connection": enumNames(tetherv1.ConnectionStatus_State_name),
	"host":       nil,
}

func enumNames(m map[int32]string) []string {
	var out []string
	for k, v := range m {
		if k != 0 {
			out = append(out, v)
		}
	}
	slices.Sort(out)
	return out
}

// parseGameServerFilter parses the AIP-160 subset "field=value" terms joined
// by " AND ", e.g. "state=READY AND host=hosts/h1".
func parseGameServerFilter(filter string) (postgres.GameServerQuery, error) {
	var q postgres.GameServerQuery
	if strings.TrimSpace(filter) == "" {
		return q, nil
	}
	seen := map[string]bool{}
	for term := range strings.SplitSeq(filter, " AND ") {
		field, value, ok := strings.Cut(term, "=")
		field, value = strings.TrimSpace(field), strings.Trim(strings.TrimSpace(value), `"`)
		if !ok || field == "" || value == "" {
			return q, invalidField("filter", fmt.Sprintf("term %q is not field=value (terms are joined by ' AND ')", strings.TrimSpace(term)))
		}
		allowed, known := filterFields[field]
		if !known {
			return q, invalidField("filter", fmt.Sprintf("unknown field %q; use state, host, health or connection", field))
		}
		if seen[field] {
			return q, invalidField("filter", fmt.Sprintf("field %q appears twice", field))
		}
		seen[field] = true
		if allowed != nil && !slices.Contains(allowed, value) {
			return q, invalidField("filter", fmt.Sprintf("%s=%s: value must be one of %s", field, value, strings.Join(allowed, ", ")))
		}
		switch field {
		case "state":
			q.State = value
		case "health":
			q.Health = value
		case "connection":
			q.Connection = value
		case "host":
			if _, err := events.ParseHostName(value); err != nil {
				return q, invalidField("filter", fmt.Sprintf("host=%s: %v", value, err))
			}
			q.Host = value
		}
	}
	return q, nil
}
