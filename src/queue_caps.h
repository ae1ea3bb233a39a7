/*
 * queue_caps.h
 *		A statement queue's cap changed in its definition, applied to the
 *		whole fleet by this server's keeper (queue_caps.c).
 */
#ifndef REDSEM_QUEUE_CAPS_H
#define REDSEM_QUEUE_CAPS_H

extern void queue_caps_apply(void);

#endif							/* REDSEM_QUEUE_CAPS_H */
