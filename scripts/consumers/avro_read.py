"""Reads a Kafka topic of Avro records as a Confluent client does: the
confluent-kafka consumer, and its AvroDeserializer, which fetches each
writer schema from the registry by the id in front of the datum.

    python avro_read.py <brokers> <registry url> <topic> <count>
    python avro_read.py decode <registry url> < hex-lines

The second form decodes framed datums given one per line in hex (a NATS
message, a Redis entry's field) and prints each as JSON.

Reads until <count> messages arrived and then no more for three seconds,
so a duplicate past the count shows. Prints one JSON line per message, in
partition and offset order:
{"partition", "offset", "key", "value", "key_id", "value_id"}. Values are
as fastavro decodes them, made JSON: bytes as {"hex": ...}, decimals as
{"decimal": "<text>"}. Exits 2 if fewer than <count> messages arrive
within 60 seconds.
"""

import json
import sys
import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext

from plain import plain


def schema_id(data):
    return int.from_bytes(data[1:5], "big") if data else None


def decode(url):
    deserializer = AvroDeserializer(SchemaRegistryClient({"url": url}))
    for line in sys.stdin:
        data = bytes.fromhex(line.strip())
        value = deserializer(data, SerializationContext("", MessageField.VALUE))
        print(json.dumps({"value": plain(value), "value_id": schema_id(data)}))


def main():
    if sys.argv[1] == "decode":
        decode(sys.argv[2])
        return
    brokers, url, topic, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    deserializer = AvroDeserializer(SchemaRegistryClient({"url": url}))
    consumer = Consumer({
        "bootstrap.servers": brokers,
        "group.id": "avro-read",
        "enable.auto.commit": False,
        "isolation.level": "read_committed",
    })
    partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
    messages = []
    deadline = time.monotonic() + 60
    quiet_since = None
    while time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is None:
            if len(messages) >= count:
                quiet_since = quiet_since or time.monotonic()
                if time.monotonic() - quiet_since >= 3:
                    break
            continue
        quiet_since = None
        if message.error():
            raise SystemExit(f"kafka: {message.error()}")
        key = message.key()
        value = message.value()
        messages.append({
            "partition": message.partition(),
            "offset": message.offset(),
            "key": plain(deserializer(key, SerializationContext(topic, MessageField.KEY))) if key else None,
            "value": plain(deserializer(value, SerializationContext(topic, MessageField.VALUE))) if value else None,
            "key_id": schema_id(key),
            "value_id": schema_id(value),
        })
    consumer.close()
    messages.sort(key=lambda m: (m["partition"], m["offset"]))
    for message in messages:
        print(json.dumps(message))
    if len(messages) < count:
        print(f"only {len(messages)} of {count} messages arrived", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
