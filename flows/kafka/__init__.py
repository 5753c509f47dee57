"""Where a record is read from Kafka and where its offset is committed: the source, the
consumers, the topics, partition discovery and fencing."""
