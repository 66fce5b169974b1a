#!/bin/sh
echo "failing on purpose"
exit 1
