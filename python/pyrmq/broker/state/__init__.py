"""The broker's persistent tables: topics and consumer offsets."""
