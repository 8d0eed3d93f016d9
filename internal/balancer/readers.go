package balancer

import (
	"bufio"
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// traefik reads Traefik's API: GET /api/http/services lists every HTTP service of the
// running configuration (pkg/api/handler_http.go's serviceRepresentation: the
// runtime.ServiceInfo with its loadBalancer.servers[].url, and serverStatus, each server's
// URL to "UP" or "DOWN" under Traefik's own health check).
type traefik struct {
	get getFunc
	url string
}

type traefikService struct {
	Name         string `json:"name"`
	LoadBalancer *struct {
		Servers []struct {
			URL string `json:"url"`
		} `json:"servers"`
	} `json:"loadBalancer"`
	ServerStatus map[string]string `json:"serverStatus"`
}

// traefikPage asks for every service at once: the API pages its lists, 100 a page by
// default (per_page).
const traefikPage = "?per_page=100000"

func (p *traefik) services(ctx context.Context) ([]traefikService, error) {
	body, err := p.get(ctx, p.url+traefikPage)
	if err != nil {
		return nil, err
	}
	var out []traefikService
	if err := json.Unmarshal(body, &out); err != nil {
		return nil, fmt.Errorf("the answer at %s is not Traefik's list of HTTP services: %w", p.url, err)
	}
	return out, nil
}

func (p *traefik) Check(ctx context.Context) error {
	_, err := p.services(ctx)
	return err
}

// Routes: a service's load balancer lists a server whose URL's host is the instance's
// address, and Traefik's health check (when set) does not hold it DOWN.
func (p *traefik) Routes(ctx context.Context, t restart.DrainTarget) (bool, error) {
	svcs, err := p.services(ctx)
	if err != nil {
		return true, err
	}
	for _, s := range svcs {
		if s.LoadBalancer == nil {
			continue
		}
		for _, srv := range s.LoadBalancer.Servers {
			u, err := url.Parse(srv.URL)
			if err != nil || u.Host != t.Address {
				continue
			}
			if !strings.EqualFold(s.ServerStatus[srv.URL], "DOWN") {
				return true, nil
			}
		}
	}
	return false, nil
}

// envoy reads Envoy's admin /clusters, one line per host statistic:
// cluster::10.0.0.5:8080::health_flags::healthy. A host Consul reports unhealthy stays
// listed with /failed_eds_health in its flags (Consul's xDS sends it with its health
// status): only a host listed healthy is routed to.
type envoy struct {
	get getFunc
	url string
}

func (p *envoy) Check(ctx context.Context) error {
	_, err := p.get(ctx, p.url)
	return err
}

func (p *envoy) Routes(ctx context.Context, t restart.DrainTarget) (bool, error) {
	body, err := p.get(ctx, p.url)
	if err != nil {
		return true, err
	}
	return envoyRoutes(body, t.Address), nil
}

// envoyRoutes reports whether /clusters' text lists address with health_flags healthy.
func envoyRoutes(body []byte, address string) bool {
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		parts := strings.Split(sc.Text(), "::")
		if len(parts) == 4 && parts[1] == address && parts[2] == "health_flags" && parts[3] == "healthy" {
			return true
		}
	}
	return false
}

// haproxyStats reads HAProxy's statistics as CSV over HTTP (the stats page's URI with
// ";csv").
type haproxyStats struct {
	get getFunc
	url string
}

func (p *haproxyStats) Check(ctx context.Context) error {
	body, err := p.get(ctx, p.url)
	if err != nil {
		return err
	}
	_, err = haproxyRoutes(body, "")
	return err
}

func (p *haproxyStats) Routes(ctx context.Context, t restart.DrainTarget) (bool, error) {
	body, err := p.get(ctx, p.url)
	if err != nil {
		return true, err
	}
	return haproxyRoutes(body, t.Address)
}

// haproxySocketProbe reads the same CSV from HAProxy's runtime API (`show stat`) on a
// unix or TCP socket (the global section's "stats socket").
type haproxySocketProbe struct {
	network, address string
	timeout          time.Duration
}

func haproxySocket(address string, timeout time.Duration) (Probe, error) {
	if path, ok := strings.CutPrefix(address, "unix:"); ok {
		return &haproxySocketProbe{network: "unix", address: "/" + strings.TrimLeft(path, "/"), timeout: timeout}, nil
	}
	return &haproxySocketProbe{network: "tcp", address: strings.TrimPrefix(strings.TrimPrefix(address, "tcp:"), "//"), timeout: timeout}, nil
}

func (p *haproxySocketProbe) read(ctx context.Context) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, p.network, p.address)
	if err != nil {
		return nil, fmt.Errorf("reaching HAProxy's runtime API at %s: %w", p.address, err)
	}
	defer conn.Close()
	if deadline, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(deadline)
	}
	if _, err := io.WriteString(conn, "show stat\n"); err != nil {
		return nil, fmt.Errorf("asking HAProxy's runtime API at %s: %w", p.address, err)
	}
	body, err := io.ReadAll(io.LimitReader(conn, maxAnswer))
	if err != nil {
		return nil, fmt.Errorf("reading HAProxy's runtime API at %s: %w", p.address, err)
	}
	return body, nil
}

func (p *haproxySocketProbe) Check(ctx context.Context) error {
	body, err := p.read(ctx)
	if err != nil {
		return err
	}
	_, err = haproxyRoutes(body, "")
	return err
}

func (p *haproxySocketProbe) Routes(ctx context.Context, t restart.DrainTarget) (bool, error) {
	body, err := p.read(ctx)
	if err != nil {
		return true, err
	}
	return haproxyRoutes(body, t.Address)
}

// haproxyRoutes reads HAProxy's CSV statistics (management guide, "9.1. CSV format": a
// header "# pxname,svname,...", then a row per frontend, server and backend) and reports
// whether a server at address (its "addr" field, ip:port: always on the runtime API, on
// the stats page with "stats show-legends") is in rotation: a status other
// than MAINT (also "MAINT (resolution)", a server-template slot whose name no longer
// resolves), DRAIN or NOLB. A server not listed is not routed to.
func haproxyRoutes(body []byte, address string) (bool, error) {
	r := csv.NewReader(bytes.NewReader(body))
	r.FieldsPerRecord = -1
	header, err := r.Read()
	if err != nil || len(header) == 0 || !strings.HasPrefix(header[0], "# ") {
		return true, errors.New("HAProxy's answer is not its CSV statistics (a header \"# pxname,svname,...\"): give the stats page's URI, or the runtime API's socket")
	}
	header[0] = strings.TrimPrefix(header[0], "# ")
	col := map[string]int{}
	for i, h := range header {
		col[h] = i
	}
	svname, okName := col["svname"]
	status, okStatus := col["status"]
	addr, okAddr := col["addr"]
	if !okName || !okStatus || !okAddr {
		return true, errors.New("HAProxy's CSV statistics have no svname, status or addr column (HAProxy 1.9 or later lists each server's addr)")
	}
	for {
		row, err := r.Read()
		if errors.Is(err, io.EOF) {
			return false, nil
		}
		if err != nil {
			return true, fmt.Errorf("reading HAProxy's CSV statistics: %w", err)
		}
		if len(row) <= max(svname, status, addr) || row[svname] == "FRONTEND" || row[svname] == "BACKEND" {
			continue
		}
		st := strings.ToUpper(row[status])
		out := strings.HasPrefix(st, "MAINT") || strings.HasPrefix(st, "DRAIN") || strings.HasPrefix(st, "NOLB")
		if row[addr] == "" && !strings.HasPrefix(st, "MAINT") {
			// The stats page lists the servers' addresses only with "stats show-legends"
			// (the runtime API always does): without them no server can be told apart. A
			// server-template slot whose name no longer resolves has none either, and is
			// in MAINT (resolution): it routes nothing.
			return true, errors.New("HAProxy's statistics do not list the servers' addresses: add \"stats show-legends\" to the section of its stats page, or give its runtime API's socket (haproxy=unix:/PATH)")
		}
		if row[addr] == address && !out {
			return true, nil
		}
	}
}
