package lease

import "github.com/prometheus/client_golang/prometheus"

// Collector returns the elector's Prometheus metrics, read when they are collected, every series
// labelled with the lease's namespace and key (constant labels, so a process's electors of different
// leases share a registry), as controller-runtime's leader_election_master_status:
//
//	lease_elector_leading{namespace,key}       1 while this replica leads (Leading), else 0
//	lease_elector_terms_total{namespace,key}   terms this replica began (OnStarted called)
//	lease_elector_fencing_token{namespace,key} the running term's lease revision (0 between terms)
func (e *Elector) Collector() prometheus.Collector {
	c := prometheus.Labels{"namespace": e.o.Namespace, "key": e.o.Key}
	return &electorCollector{e: e,
		leading: prometheus.NewDesc("lease_elector_leading", "1 while this replica leads: its OnStarted runs with a lease that is held.", nil, c),
		terms:   prometheus.NewDesc("lease_elector_terms_total", "Terms this replica began (OnStarted called).", nil, c),
		token:   prometheus.NewDesc("lease_elector_fencing_token", "The running term's lease revision, its fencing token (0 between terms).", nil, c),
	}
}

type electorCollector struct {
	e                     *Elector
	leading, terms, token *prometheus.Desc
}

func (c *electorCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.leading
	ch <- c.terms
	ch <- c.token
}

func (c *electorCollector) Collect(ch chan<- prometheus.Metric) {
	leading, token := 0.0, 0.0
	if l := c.e.current.Load(); l != nil {
		token = float64(l.Revision())
		if l.Held() {
			leading = 1
		}
	}
	ch <- prometheus.MustNewConstMetric(c.leading, prometheus.GaugeValue, leading)
	ch <- prometheus.MustNewConstMetric(c.terms, prometheus.CounterValue, float64(c.e.terms.Load()))
	ch <- prometheus.MustNewConstMetric(c.token, prometheus.GaugeValue, token)
}
