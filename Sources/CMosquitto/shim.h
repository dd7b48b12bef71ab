#ifndef GROUPSYNC_CMOSQUITTO_SHIM_H
#define GROUPSYNC_CMOSQUITTO_SHIM_H

#include <mosquitto.h>
#include <mqtt_protocol.h>
// For the network loop: `SSL_pending` on the handle `mosquitto_ssl_get` returns, and the wake-up channel.
#include <openssl/ssl.h>
#ifdef __linux__
#include <sys/eventfd.h>
#endif

#endif
