"""Counts a Kafka topic's messages and the bytes of their keys and values.

    python topic_bytes.py <brokers> <topic>

Prints "<messages> <key bytes> <value bytes>" once the topic has given
nothing for five seconds.
"""

import sys

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition


def main():
    brokers, topic = sys.argv[1], sys.argv[2]
    consumer = Consumer({"bootstrap.servers": brokers, "group.id": "topic-bytes", "enable.auto.commit": False})
    partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
    count = keys = values = idle = 0
    while idle < 10:
        batch = consumer.consume(10000, 0.5)
        if not batch:
            idle += 1
            continue
        idle = 0
        for message in batch:
            if message.error():
                raise SystemExit(f"kafka: {message.error()}")
            count += 1
            keys += len(message.key() or b"")
            values += len(message.value() or b"")
    consumer.close()
    print(count, keys, values)


if __name__ == "__main__":
    main()
