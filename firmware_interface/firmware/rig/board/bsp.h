/* Board support a board port of the rig firmware needs (docs/firmware.md, "The board port"): what the vendor's
 * SDK provides on a Cortex-M4F/M7 board (Teensy 4.x, STM32F4). bsp_stub.c is a stand-in with no hardware, so the
 * port compiles and links anywhere; bsp_stm32f405.c is an STM32F405 at register level (RM0090). */
#ifndef BSP_H
#define BSP_H

#include <stddef.h>
#include <stdint.h>

/* The transmit ring (rig_board.c): the port writes whole frames at tx_head, the UART drains from tx_tail. */
#define TX_RING_BYTES 16384u
extern volatile uint8_t tx_ring[TX_RING_BYTES];
extern volatile uint32_t tx_head, tx_tail;

/* What the board has: the rig's servo and sensor channels must fit (else the port does not start). */
extern const uint8_t bsp_pwm_channels, bsp_adc_channels;

void bsp_init(uint32_t baud);                      /* clocks, the UART at baud, PWM timers, ADCs, the e-stop GPIO */
uint32_t bsp_micros(void);                         /* free-running 32-bit µs timer */
int bsp_uart_getc(void);                           /* next received byte, or -1 (from the RX interrupt's ring) */
void bsp_uart_kick(void);                          /* start draining the ring (DMA or interrupt) if idle */
void bsp_pwm_write_us(uint8_t channel, float pulse_us);  /* a hobby servo's pulse width */
float bsp_servo_feedback(uint8_t channel);         /* measured position (feedback potentiometer), raw unit */
int32_t bsp_adc_read(uint8_t channel);             /* a strain-gauge / load-cell bridge ADC, signed counts */
int bsp_estop_pressed(void);                       /* the e-stop button's GPIO, debounced */
void bsp_idle(uint32_t max_us);                    /* sleep until an interrupt or max_us (WFI) */

#endif
