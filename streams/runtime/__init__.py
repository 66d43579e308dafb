"""Plumbing with no domain words: the faust app and its settings, the Avro codec, the one producer,
topic administration, topic views, guarded state stores, metrics, and the faust/aiokafka
workarounds (docs/architecture.md lists each, with the upstream report where one is known; most
do not cite one in the code yet). Imports nothing above it."""
