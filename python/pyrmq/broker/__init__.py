"""The broker: RocketMQ's remoting processors over the pyrmq store."""
