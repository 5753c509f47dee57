"""Moving from Kafka Connect's Elasticsearch sink to the flow: `es-sink migrate config`
(the connector's configuration as the flow's settings, option by option) and `es-sink
migrate offsets` (the connector's committed offsets copied to the flow's group).

- `connector`: read a connector's configuration (JSON, `.properties`, a worker's REST API);
- `translate`, `smts`: map its options and its SMT chain; `report`: the table's rows;
- `render`: the ES_SINK_CONFIG YAML.

The offsets copy, which talks to Kafka through the command's clients, is
`flows.cli.migrate_offsets`.

Operator tools, like `flows.cli`: the flow itself never imports them.
"""
