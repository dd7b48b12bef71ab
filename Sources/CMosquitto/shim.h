#ifndef GROUPSYNC_CMOSQUITTO_SHIM_H
#define GROUPSYNC_CMOSQUITTO_SHIM_H

#include <mosquitto.h>
#include <mqtt_protocol.h>

#endif
