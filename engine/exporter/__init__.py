"""The Prometheus exporter: background collection (collect), the metric families of a scrape
(families), the HTTP endpoint (server), its web configuration (webconfig), and what ships with
it: the Grafana dashboard (dashboard) and the alerting rules (alerts)."""
