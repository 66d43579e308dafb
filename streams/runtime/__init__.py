"""Plumbing with no domain words: the faust app and its settings, the Avro codec, the one producer,
topic administration, topic views, guarded state stores, metrics, and the faust/aiokafka
workarounds (each citing the upstream issue it works around). Imports nothing above it."""
